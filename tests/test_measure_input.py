"""``clustersim measure input``: the host's input pipeline, timed (simulator/measure/input_pipeline).

The pipelines are checked on real pixels (a uniform image normalises to the recipe's constants,
crops stay inside the image with the documented area and ratio), the sharing out of samples
over worker processes on checksums, and the CLI on what it prints and writes: the CPU time per
sample that ``clustersim train --decode-per-sample`` then takes.
"""

import io
import math

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.measure import input_pipeline as ip
from simulator.units import parse_duration


def _png(width, height, value):
    buffer = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), value, dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def small():
    return ip.synthetic_jpegs(6, 80, 60, quality=85, seed=3)


def test_synthetic_jpegs_are_deterministic_valid_and_of_the_stated_size():
    a = ip.synthetic_jpegs(3, 120, 90, quality=80, seed=7)
    b = ip.synthetic_jpegs(3, 120, 90, quality=80, seed=7)
    c = ip.synthetic_jpegs(3, 120, 90, quality=80, seed=8)
    assert a.encoded == b.encoded and a.encoded != c.encoded
    for data in a.encoded:
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "JPEG" and image.size == (120, 90)
    assert "120x90" in a.label and "q80" in a.label
    for bad in ((0, 120, 90, 80), (1, 8, 90, 80), (1, 120, 90, 0), (1, 120, 90, 96)):
        with pytest.raises(ConfigError):
            ip.synthetic_jpegs(*bad)


def test_random_resized_crop_stays_inside_with_the_documented_area_and_ratio():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        left, top, w, h = ip.crop_box(500, 375, rng)
        assert 0 <= left and left + w <= 500 and 0 <= top and top + h <= 375
        # rounding each side to whole pixels moves area and ratio by a pixel's worth
        assert 0.08 * 0.95 <= w * h / (500 * 375) <= 1.0
        assert 3 / 4 * 0.95 <= w / h <= 4 / 3 * 1.05


def test_crop_falls_back_to_the_centred_clamped_ratio_when_nothing_fits():
    # a 1000 x 20 strip: any crop of ratio <= 4/3 and area >= 8 % would be taller than 20 px
    left, top, w, h = ip.crop_box(1000, 20, np.random.default_rng(1))
    assert (w, h) == (round(20 * 4 / 3), 20) and left == (1000 - w) // 2 and top == 0
    left, top, w, h = ip.crop_box(20, 1000, np.random.default_rng(1))
    assert (w, h) == (20, round(20 / (3 / 4))) and top == (1000 - h) // 2 and left == 0


@pytest.mark.parametrize("pipeline", ["imagenet-train", "imagenet-eval"])
def test_a_uniform_image_normalises_to_the_recipe_constants(pipeline):
    value = 200
    out = ip.PIPELINES[pipeline](_png(300, 240, value), np.random.default_rng(0))
    assert out.shape == (3, 224, 224) and out.dtype == np.float32
    for channel in range(3):
        expected = (value / 255 - ip.IMAGENET_MEAN[channel]) / ip.IMAGENET_STD[channel]
        assert np.allclose(out[channel], expected, atol=1e-5)


def test_train_pipeline_flips_half_the_time_and_eval_never_draws():
    # left half black, right half white: a flip puts white on the left
    pixels = np.zeros((200, 200, 3), np.uint8)
    pixels[:, 100:] = 255
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    flips = 0
    for k in range(400):
        out = ip.PIPELINES["imagenet-train"](buffer.getvalue(), np.random.default_rng([5, k]))
        flips += out[0, :, 0].mean() > out[0, :, -1].mean()
    assert 150 <= flips <= 250
    eval_a = ip.PIPELINES["imagenet-eval"](buffer.getvalue(), np.random.default_rng(1))
    eval_b = ip.PIPELINES["imagenet-eval"](buffer.getvalue(), np.random.default_rng(2))
    assert np.array_equal(eval_a, eval_b)
    assert ip.PIPELINES["decode"](buffer.getvalue(), None).shape == (200, 200, 3)


def test_checksums_depend_on_the_seed_not_on_how_samples_are_shared(small):
    whole = ip.run_pipeline(small, "imagenet-train", range(12), seed=4)
    halves = (ip.run_pipeline(small, "imagenet-train", range(0, 12, 2), seed=4)
              + ip.run_pipeline(small, "imagenet-train", range(1, 12, 2), seed=4))
    assert math.isclose(whole, halves, rel_tol=1e-12)
    assert not math.isclose(whole, ip.run_pipeline(small, "imagenet-train", range(12), seed=5),
                            rel_tol=1e-9)
    with pytest.raises(ConfigError, match="valid: decode, imagenet-eval, imagenet-train"):
        ip.run_pipeline(small, "bogus", range(1))


def test_measured_rows_per_worker_count_agree_with_the_pipeline_run_in_process(small):
    frame = ip.measure_input_pipeline(small, "imagenet-train", workers=[1, 2], samples=16,
                                      seed=4)
    assert list(frame.columns) == list(ip.COLUMNS) and list(frame["workers"]) == [1, 2]
    assert (frame["cpu_s_per_sample"] > 0).all() and (frame["samples_per_s"] > 0).all()
    assert (frame["samples"] == 16).all() and (frame["image_count"] == 6).all()
    assert (frame["mean_width_px"] == 80).all() and (frame["mean_height_px"] == 60).all()
    expected = ip.run_pipeline(small, "imagenet-train", range(16), seed=4)
    assert np.allclose(frame["checksum"], expected, rtol=1e-12)
    assert (frame["cpus"] == ip.available_cpus()).all()
    for bad in ({"workers": [0]}, {"workers": []}, {"samples": 0}):
        with pytest.raises(ConfigError):
            ip.measure_input_pipeline(small, "decode", **{"workers": [1], "samples": 4, **bad})


def test_larger_images_cost_more_cpu_per_sample():
    # 400 times the pixels to decode; the margin is far beyond timer noise
    tiny = ip.synthetic_jpegs(4, 32, 24, seed=1)
    large = ip.synthetic_jpegs(4, 640, 480, seed=1)
    cost = [ip.measure_input_pipeline(images, "decode", workers=[1], samples=24)
            ["cpu_s_per_sample"].iloc[0] for images in (tiny, large)]
    assert cost[1] > 5 * cost[0]


def test_the_suggested_row_is_the_most_workers_that_fit_the_cpus():
    frame = pd.DataFrame({"workers": [1, 2, 4, 8], "cpus": 4,
                          "cpu_s_per_sample": [1.0, 1.1, 1.3, 2.0]})
    assert ip.suggested_row(frame)["workers"] == 4
    frame["cpus"] = 0
    assert ip.suggested_row(frame)["workers"] == 1


def test_load_images_reads_a_tree_in_path_order_and_names_a_bad_file(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a.png").write_bytes(_png(20, 20, 10))
    (tmp_path / "b" / "c.JPG").write_bytes(ip.synthetic_jpegs(1, 32, 32).encoded[0])
    (tmp_path / "notes.txt").write_text("not an image")
    images = ip.load_images(tmp_path)
    assert len(images.encoded) == 2 and images.encoded[0] == (tmp_path / "a.png").read_bytes()
    assert len(ip.load_images(tmp_path, limit=1).encoded) == 1
    (tmp_path / "broken.jpeg").write_bytes(b"\xff\xd8 not really")
    with pytest.raises(ConfigError, match="broken.jpeg"):
        ip.load_images(tmp_path)
    (tmp_path / "broken.jpeg").unlink()
    whole = ip.synthetic_jpegs(1, 300, 200).encoded[0]
    (tmp_path / "truncated.jpg").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(ConfigError, match="truncated.jpg"):
        ip.load_images(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no .jpg"):
        ip.load_images(empty)
    with pytest.raises(ConfigError, match="not a directory"):
        ip.load_images(tmp_path / "missing")


def test_cli_prints_the_train_flags_and_writes_the_csv(tmp_path, capsys):
    out = tmp_path / "input.csv"
    assert main(["measure", "input", "--synthetic", "4", "--size", "96x64", "--samples", "8",
                 "--workers", "1", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = pd.read_csv(out)
    assert list(rows.columns) == list(ip.COLUMNS) and len(rows) == 1
    suggestion = printed.strip().splitlines()[-1].split()
    assert suggestion[:3] == ["simulate", "with:", "clustersim"]
    decode_s = parse_duration(suggestion[suggestion.index("--decode-per-sample") + 1])
    assert math.isclose(decode_s, rows["cpu_s_per_sample"].iloc[0], rel_tol=1e-3)
    assert int(suggestion[suggestion.index("--host-cores") + 1]) == rows["cpus"].iloc[0]


def test_cli_feeds_train_a_starved_host(tmp_path, capsys):
    """The printed flags, given to ``train``: 8 V100s behind 2 cores at the measured cost
    take as long as the cores need to prepare a step's 8 x 64 samples, plus the all-reduce the
    step cannot hide (the data-stall bound), and far longer than the GPUs alone."""
    assert main(["measure", "input", "--synthetic", "4", "--size", "200x150", "--samples",
                 "8", "--workers", "1"]) == 0
    words = capsys.readouterr().out.strip().splitlines()[-1].split()
    flags = words[words.index("--decode-per-sample"):]
    flags[flags.index("--host-cores") + 1] = "2"
    cost_s = parse_duration(flags[1])
    out = tmp_path / "train"
    assert main(["train", "--topology", "dgx1-v100", "--model", "resnet50", "--gpus", "8",
                 "--aggregation", "ring", "--batch-per-gpu", "64", *flags, "-o",
                 str(out)]) == 0
    row = pd.read_csv(out / "results.csv").iloc[0]
    assert math.isclose(row["iteration_s"], 8 * 64 * cost_s / 2 + row["exposed_comm_s"],
                        rel_tol=1e-9)
    assert row["iteration_s"] > 2 * row["compute_s"]


def test_cli_rejects_bad_input_in_one_line(tmp_path, capsys):
    for argv in (["--images", str(tmp_path), "--synthetic", "2"], ["--size", "500"],
                 ["--size", "100000x100000"], ["--limit", "0"],
                 ["--workers", "0"], ["--pipeline", "bogus"], ["--images", str(tmp_path)],
                 ["--quality", "0"], ["--samples", "0", "--synthetic", "1", "--size", "32x32"],
                 ["--timeout", "-1", "--synthetic", "1", "--size", "32x32"]):
        assert main(["measure", "input", *argv]) == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_a_worker_failure_is_one_measurement_error():
    from simulator.measure import MeasurementError

    whole = ip.synthetic_jpegs(1, 300, 200).encoded[0]
    truncated = ip.InputImages((whole[:len(whole) // 2],), "one truncated JPEG")
    with pytest.raises(MeasurementError, match="rank 0 failed .*image file is truncated"):
        ip.measure_input_pipeline(truncated, "decode", workers=[1], samples=2)
    with pytest.raises(MeasurementError, match="did not start in 0.001 s; the workers were "
                                               "killed"):
        ip.measure_input_pipeline(ip.synthetic_jpegs(2, 64, 48), "decode", workers=[2],
                                  samples=2, timeout_s=0.001)
    with pytest.raises(ConfigError, match="--timeout"):
        ip.measure_input_pipeline(truncated, "decode", workers=[1], samples=2, timeout_s=0)
