"""The input pipeline on this host, timed: CPU-seconds per training sample.

A machine's GPUs share its CPU cores for reading, decoding and augmenting their samples. When
the cores cannot keep up, training runs at the rate they prepare samples, not at the GPUs'
rate (the data-stall model of :mod:`simulator.workload.overheads`). The simulator takes that
cost as ``decode_cpu_s_per_sample`` with the machine's ``host_cores`` (``clustersim train
--decode-per-sample ... --host-cores ...``). No published source gives it for a pipeline and a
host, and it varies with both, so it is measured here, on the user's own images and CPUs.

What a sample costs
-------------------
One sample is one image taken through a named pipeline (:data:`PIPELINES`), from its encoded
bytes in memory (storage is not timed: the data-stall model's "prep", not its "fetch") to a
normalised float32 CHW array:

``imagenet-train``
    decode (Pillow), random resized crop to 224 x 224 (area fraction uniform in [0.08, 1],
    log aspect ratio uniform in [log 3/4, log 4/3], ten tries, then a centred crop of the
    clamped ratio; bilinear resize), random horizontal flip, scale to [0, 1], normalise by
    the ImageNet channel mean and standard deviation. This is the training transform of the
    ResNet-50 recipes the published scaling tables ran (torchvision's ``RandomResizedCrop``
    and ``RandomHorizontalFlip`` with their default arguments), written here with Pillow and
    numpy so that no torchvision is needed.
``imagenet-eval``
    decode, resize the shorter side to 256 (bilinear), centre crop 224, scale, normalise.
``decode``
    decode to RGB only.

Every random choice of sample ``k`` comes from ``numpy.random.default_rng([seed, k])``, so the
same images, pipeline and seed give the same arrays whatever the worker count
(:func:`run_pipeline`'s checksum).

How it is timed
---------------
For each worker count ``w``, ``w`` worker processes are started (``python -m`` this module, as
the other measurements start their ranks: nothing depends on the caller's main module, so the
same code serves the CLI, scripts and notebooks). Each takes its share of the images through
the pipeline untimed (imports, decoders and caches warm), says it is ready, and waits for the
parent's start signal. It then takes its share of the ``samples`` and reports when it started
and ended (``time.monotonic``, one clock for every process of the machine) and its own CPU
time (``time.process_time``). The wall time runs from the first start to the last end; the
CPU times are summed. ``cpu_s_per_sample`` is that sum over the samples: the number the
simulator wants. ``samples_per_s`` is what ``w`` workers delivered on this host. With ``w``
at most the CPUs this process may run on, ``w / cpu_s_per_sample`` is close to
``samples_per_s``; beyond, the workers share CPUs and the CPU time per sample stays while the
rate stops growing. A worker that fails (a bad image, memory) stops the run with its last
output line; ``timeout_s`` bounds each worker count's run.

Images: a directory of the user's own (``.jpg``, ``.jpeg``, ``.png``; the real measurement), or
synthetic JPEGs (:func:`synthetic_jpegs`: seeded smooth colour fields with fine noise, at a
stated size and quality; a quick check of the machinery, not of a data set).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from simulator.errors import ConfigError, unknown_name

from . import MeasurementError, available_cpus, cpu_name

__all__ = ["COLUMNS", "IMAGE_SUFFIXES", "PIPELINES", "InputImages", "load_images",
           "measure_input_pipeline", "run_pipeline", "suggested_row", "synthetic_jpegs",
           "write_input_csv"]

#: File suffixes :func:`load_images` reads (case-insensitive).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
#: Output side of the ImageNet transforms, pixels.
CROP_PX = 224
#: Shorter side before the evaluation transform's centre crop, pixels.
EVAL_RESIZE_PX = 256
#: ImageNet channel mean and standard deviation of the recipes' ``Normalize`` (RGB, [0, 1]).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: ``RandomResizedCrop`` defaults: area fraction, aspect ratio, tries before the fallback.
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
CROP_TRIES = 10
#: Largest synthetic image, pixels: below Pillow's decompression-bomb limit (89.5 Mpx).
MAX_SYNTHETIC_PIXELS = 64 * 10**6

COLUMNS = ("pipeline", "images", "image_count", "mean_image_bytes", "mean_width_px",
           "mean_height_px", "workers", "samples", "wall_s", "samples_per_s",
           "cpu_s_per_sample", "cpus", "cpu_model", "pillow", "seed", "checksum")


def _pillow():
    try:
        from PIL import Image
    except ImportError:   # matplotlib depends on Pillow, so this is a broken install
        raise ConfigError("clustersim measure input needs Pillow (a dependency of "
                          "matplotlib): pip install pillow") from None
    return Image


# ---------------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InputImages:
    """Encoded images held in memory, and what they are (for the CSV)."""

    encoded: tuple[bytes, ...]
    label: str

    def __post_init__(self):
        if not self.encoded:
            raise ConfigError(f"no images in {self.label}")


def synthetic_jpegs(count: int, width_px: int, height_px: int, quality: int = 90,
                    seed: int = 0) -> InputImages:
    """``count`` JPEGs of ``width_px`` x ``height_px``: a smooth random colour field (a
    16x-coarser grid of uniform colours, bilinearly enlarged) plus Gaussian noise of standard
    deviation 6 grey levels, encoded by Pillow at ``quality``. Deterministic for a seed."""
    if count < 1:
        raise ConfigError(f"--synthetic must be >= 1 images, got {count}")
    if (width_px < 16 or height_px < 16
            or width_px * height_px > MAX_SYNTHETIC_PIXELS):
        raise ConfigError(f"--size must be at least 16x16 pixels and at most "
                          f"{MAX_SYNTHETIC_PIXELS // 10**6} megapixels (e.g. 8000x8000), got "
                          f"{width_px}x{height_px}")
    if not 1 <= quality <= 95:
        raise ConfigError(f"--quality must be a JPEG quality in 1..95, got {quality}")
    import io

    Image = _pillow()
    rng = np.random.default_rng(seed)
    encoded = []
    for _ in range(count):
        coarse = rng.integers(0, 256, size=(max(2, height_px // 16), max(2, width_px // 16), 3),
                              dtype=np.uint8)
        field = np.asarray(Image.fromarray(coarse).resize((width_px, height_px),
                                                          Image.BILINEAR), dtype=np.float32)
        field += rng.normal(0.0, 6.0, size=field.shape).astype(np.float32)
        buffer = io.BytesIO()
        Image.fromarray(np.clip(field, 0, 255).astype(np.uint8)).save(
            buffer, format="JPEG", quality=quality)
        encoded.append(buffer.getvalue())
    return InputImages(tuple(encoded), f"synthetic {count} x {width_px}x{height_px} JPEG "
                                       f"q{quality} seed {seed}")


def load_images(directory, limit: int = 256) -> InputImages:
    """Up to ``limit`` image files under ``directory`` (recursively, sorted by path), read into
    memory; every one is decoded once to check it."""
    if limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {limit}")
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"--images {str(directory)!r}: not a directory")
    paths = sorted(p for p in root.rglob("*")
                   if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)[:limit]
    if not paths:
        raise ConfigError(f"--images {str(directory)!r}: no {', '.join(IMAGE_SUFFIXES)} files")
    encoded = []
    for path in paths:
        data = path.read_bytes()
        try:
            with _open(data) as image:
                image.load()   # a full decode: a truncated file fails here, by name
        except Exception as exc:   # Pillow raises many kinds for a bad file
            raise ConfigError(f"--images: {path} is not a readable image ({exc})") from None
        encoded.append(data)
    return InputImages(tuple(encoded), f"{root} ({len(paths)} files)")


# ---------------------------------------------------------------------------------------------
# Pipelines: encoded bytes -> float32 CHW, one sample
# ---------------------------------------------------------------------------------------------

def _open(data: bytes):
    """Pillow's image of ``data`` (lazy). The user's own large photographs are not an attack:
    Pillow's warning above 89 megapixels is silenced; above twice that it still refuses."""
    import io
    import warnings

    Image = _pillow()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return Image.open(io.BytesIO(data))


def _decode(data: bytes):
    return _open(data).convert("RGB")


def _normalised(image) -> np.ndarray:
    pixels = np.asarray(image, dtype=np.float32) * (1.0 / 255.0)
    pixels = (pixels - np.asarray(IMAGENET_MEAN, np.float32)) / np.asarray(IMAGENET_STD,
                                                                            np.float32)
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def crop_box(width_px: int, height_px: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """The random resized crop's box ``(left, top, width, height)`` for an image of that size:
    up to :data:`CROP_TRIES` draws of area fraction and log aspect ratio, the first that fits;
    else the centred crop of the whole image with its ratio clamped to :data:`CROP_RATIO`."""
    area = width_px * height_px
    log_lo, log_hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(CROP_TRIES):
        target = area * rng.uniform(*CROP_SCALE)
        ratio = math.exp(rng.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(target * ratio)))
        h = int(round(math.sqrt(target / ratio)))
        if 0 < w <= width_px and 0 < h <= height_px:
            top = int(rng.integers(0, height_px - h + 1))
            left = int(rng.integers(0, width_px - w + 1))
            return left, top, w, h
    ratio = width_px / height_px
    if ratio < CROP_RATIO[0]:
        w, h = width_px, int(round(width_px / CROP_RATIO[0]))
    elif ratio > CROP_RATIO[1]:
        w, h = int(round(height_px * CROP_RATIO[1])), height_px
    else:
        w, h = width_px, height_px
    return (width_px - w) // 2, (height_px - h) // 2, w, h


def _imagenet_train(data: bytes, rng: np.random.Generator) -> np.ndarray:
    Image = _pillow()
    image = _decode(data)
    left, top, w, h = crop_box(image.width, image.height, rng)
    image = image.resize((CROP_PX, CROP_PX), Image.BILINEAR, box=(left, top, left + w, top + h))
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    return _normalised(image)


def _imagenet_eval(data: bytes, rng: np.random.Generator) -> np.ndarray:
    Image = _pillow()
    image = _decode(data)
    scale = EVAL_RESIZE_PX / min(image.width, image.height)
    size = (max(CROP_PX, int(round(image.width * scale))),
            max(CROP_PX, int(round(image.height * scale))))
    image = image.resize(size, Image.BILINEAR)
    left, top = (size[0] - CROP_PX) // 2, (size[1] - CROP_PX) // 2
    return _normalised(image.crop((left, top, left + CROP_PX, top + CROP_PX)))


def _decode_only(data: bytes, rng: np.random.Generator) -> np.ndarray:
    return np.asarray(_decode(data), dtype=np.uint8)


#: The pipelines, by name (module docstring).
PIPELINES: dict[str, Callable[[bytes, np.random.Generator], np.ndarray]] = {
    "imagenet-train": _imagenet_train,
    "imagenet-eval": _imagenet_eval,
    "decode": _decode_only,
}


def _pipeline(name: str):
    try:
        return PIPELINES[name]
    except KeyError:
        raise unknown_name("input pipeline", name, PIPELINES) from None


def run_pipeline(images: InputImages, pipeline: str, indices: Sequence[int],
                 seed: int = 0) -> float:
    """Take samples ``indices`` (sample ``k`` is image ``k mod count``, with its own generator
    ``default_rng([seed, k])``) through ``pipeline``; return the sum of every output value
    (a checksum: the same for the same inputs, however the samples are shared out)."""
    transform = _pipeline(pipeline)
    total = 0.0
    for k in indices:
        out = transform(images.encoded[k % len(images.encoded)],
                        np.random.default_rng([seed, int(k)]))
        total += float(out.sum(dtype=np.float64))
    return total


# ---------------------------------------------------------------------------------------------
# Timing, in worker processes
# ---------------------------------------------------------------------------------------------

#: Files of one timed run in its temporary folder: the images, and the start barrier.
_IMAGES_FILE = "images.pickle"
_GO_FILE = "go"
_MODULE = "simulator.measure.input_pipeline"   # what every worker process runs (python -m)


def _shares(indices: Sequence[int], parts: int) -> list[list[int]]:
    return [list(indices[i::parts]) for i in range(parts)]


def _worker(config: dict, rank: int) -> dict:
    """One worker process: warm up on its share of the images, say it is ready, wait for the
    parent's start signal, then time its share of the samples (wall clock and own CPU)."""
    import pickle

    folder = Path(config["result_dir"])
    images = InputImages(tuple(pickle.loads((folder / _IMAGES_FILE).read_bytes())), "")
    count = len(images.encoded)
    run_pipeline(images, config["pipeline"], _shares(range(count), config["workers"])[rank]
                 or [0], config["seed"])
    (folder / f"ready{rank}").touch()
    while not (folder / _GO_FILE).exists():
        time.sleep(0.001)
    start_s, start_cpu_s = time.monotonic(), time.process_time()
    checksum = run_pipeline(images, config["pipeline"],
                            _shares(range(config["samples"]), config["workers"])[rank],
                            config["seed"])
    return {"start_s": start_s, "end_s": time.monotonic(),
            "cpu_s": time.process_time() - start_cpu_s, "checksum": checksum}


def _time_workers(images: InputImages, pipeline: str, workers: int, samples: int,
                  seed: int, timeout_s: float) -> dict:
    """Run ``workers`` worker processes (``python -m`` this module, like the other
    measurements: nothing depends on the caller's main module) and time them from the first
    start to the last end (``time.monotonic``: one clock for every process of the machine)."""
    import pickle
    import subprocess
    import tempfile

    from .collectives import _argv, _collect, _env, _launch, _read_results, _write_config

    what = "the input pipeline measurement"
    with tempfile.TemporaryDirectory(prefix="clustersim-input-") as tmp:
        folder = Path(tmp)
        (folder / _IMAGES_FILE).write_bytes(pickle.dumps(list(images.encoded)))
        config = {"result_dir": tmp, "pipeline": pipeline, "seed": seed, "workers": workers,
                  "samples": samples}
        path, env = _write_config(config, tmp), _env("lo")
        deadline = time.monotonic() + timeout_s

        def start_together(procs, logs) -> float:
            """Wait until every worker is warm, then give the one start signal."""
            while not all((folder / f"ready{r}").exists() for r in range(workers)):
                if any(proc.poll() not in (None, 0) for proc in procs):
                    _collect(procs, logs, 0.0, what)   # names the failed worker, kills the rest
                if time.monotonic() > deadline:
                    raise MeasurementError(f"{what} did not start in {timeout_s:g} s; the "
                                           f"workers were killed")
                time.sleep(0.005)
            (folder / _GO_FILE).touch()
            return max(1.0, deadline - time.monotonic())

        _launch(workers, timeout_s, tmp, lambda rank, log: subprocess.Popen(
            _argv(path, rank, _MODULE), env=env, stdout=log, stderr=subprocess.STDOUT),
            what, started=start_together)
        results = _read_results(tmp, workers)
    wall_s = max(r["end_s"] for r in results) - min(r["start_s"] for r in results)
    return {"workers": workers, "samples": samples, "wall_s": wall_s,
            "samples_per_s": samples / wall_s,
            "cpu_s_per_sample": sum(r["cpu_s"] for r in results) / samples,
            "checksum": sum(r["checksum"] for r in results)}


def _image_sizes(images: InputImages) -> tuple[float, float]:
    sizes = []
    for data in images.encoded:
        with _open(data) as image:
            sizes.append(image.size)
    widths, heights = zip(*sizes)
    return float(np.mean(widths)), float(np.mean(heights))


def measure_input_pipeline(images: InputImages, pipeline: str = "imagenet-train",
                           workers: Sequence[int] = (1,), samples: int = 256,
                           seed: int = 0, timeout_s: float = 600.0):
    """Time ``pipeline`` over ``images`` with each worker count: a DataFrame of
    :data:`COLUMNS`, one row per worker count (module docstring, "How it is timed")."""
    import pandas as pd

    _pillow()
    from PIL import __version__ as pillow_version

    _pipeline(pipeline)
    if samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {samples}")
    if not workers or any(int(w) < 1 for w in workers):
        raise ConfigError(f"--workers must be integers >= 1, got {list(workers)}")
    if not timeout_s > 0:
        raise ConfigError(f"--timeout must be > 0 seconds, got {timeout_s!r}")
    width, height = _image_sizes(images)
    common = {"pipeline": pipeline, "images": images.label, "image_count": len(images.encoded),
              "mean_image_bytes": float(np.mean([len(b) for b in images.encoded])),
              "mean_width_px": width, "mean_height_px": height, "cpus": available_cpus(),
              "cpu_model": cpu_name(), "pillow": pillow_version, "seed": seed}
    rows = [{**common, **_time_workers(images, pipeline, int(w), samples, seed, timeout_s)}
            for w in workers]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def suggested_row(frame):
    """The row whose CPU time per sample to give the simulator: the most workers not above the
    CPUs this process may use (the loaded host's cost, without oversubscription), else the
    fewest workers."""
    fitting = frame[frame["workers"] <= frame["cpus"]]
    if len(fitting):
        return fitting.loc[fitting["workers"].idxmax()]
    return frame.loc[frame["workers"].idxmin()]


def write_input_csv(frame, path) -> Path:
    """Write measured rows to ``path`` atomically (temp file, then rename)."""
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"not a measured input-pipeline frame: missing columns "
                          f"{', '.join(missing)}")
    from ..report.output import write_text

    return write_text(Path(path), frame.to_csv(index=False, columns=list(COLUMNS),
                                               float_format="%.6g", lineterminator="\n"))


if __name__ == "__main__":
    from .collectives import _worker_main

    sys.exit(_worker_main(sys.argv[1:], _worker))
