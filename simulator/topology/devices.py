"""Device presets: peak rates and memory of real GPUs and host CPUs, with their datasheets.

A topology node that stands for a device (a GPU, a host CPU, a parameter-server host) names one
of these presets in its ``device`` attribute and copies the numbers the engine needs. Every value
is SI: FLOP/s, bytes/s, bytes, watts.

Conventions, so that rows compare:

* ``fp32_flops_per_s`` is the vendor's peak FP32 rate (boost clock for GPUs, base clock x FMA
  width for CPUs).
* ``fp16_flops_per_s`` is the peak *dense* FP16 rate usable for mixed-precision training: tensor
  cores with FP32 accumulation, no structured sparsity. GeForce parts run FP32 accumulation at
  half their FP16-accumulate rate, so their half-rate figure is used. Parts without FP16
  arithmetic (Kepler, CPUs) repeat the FP32 rate.
* ``memory_bytes`` is binary: a "16 GB" HBM2 or GDDR card holds 16 GiB.
* A Tesla K80 *board* carries two GK210 dies that CUDA shows as two devices; ``k80-gk210`` is one
  die (half of every board figure).

The rate at which a device can sum an incoming message into a buffer is bounded by memory
bandwidth: an elementwise ``a += b`` reads two operands and writes one result, three bytes of
memory traffic per byte of message, hence :attr:`Device.reduce_bytes_per_s` = memory bandwidth / 3.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import unknown_name

__all__ = ["DEVICES", "SOCKET_LINKS", "Device", "SocketLink", "get_device", "socket_link"]

_GiB = 2**30


@dataclass(frozen=True)
class Device:
    """One GPU or CPU model.

    Attributes
    ----------
    name : str
        Registry key, e.g. ``"a100-sxm4-40gb"``.
    kind : str
        ``"gpu"`` or ``"cpu"``.
    fp32_flops_per_s, fp16_flops_per_s : float
        Peak FP32 and dense mixed-precision FP16 rates (see the module notes), FLOP/s.
    memory_bandwidth_bytes_per_s : float
        Peak device-memory bandwidth, bytes/s (decimal, as datasheets quote it).
    memory_bytes : int
        Device memory, bytes (binary GiB, see the module notes).
    tdp_watts : float
        Thermal design power, W.
    source : str
        Where the numbers come from.
    """

    name: str
    kind: str
    fp32_flops_per_s: float
    fp16_flops_per_s: float
    memory_bandwidth_bytes_per_s: float
    memory_bytes: int
    tdp_watts: float
    source: str

    @property
    def reduce_bytes_per_s(self) -> float:
        """Message bytes per second the device can sum into a buffer: memory bandwidth / 3.

        An elementwise sum reads two operands and writes one result, so each message byte costs
        three bytes of memory traffic. This is the memory-bound rate; compute is never the limit
        for a sum.
        """
        return self.memory_bandwidth_bytes_per_s / 3


def _rows():
    yield Device(
        "k80-gk210", "gpu", 4.368e12, 4.368e12, 240e9, 12 * _GiB, 150.0,
        "NVIDIA Tesla K80 datasheet (2014): per board two GK210 dies, 4992 CUDA cores, 8.73 "
        "TFLOPS FP32 at 875 MHz boost, 480 GB/s GDDR5, 24 GB, 300 W. One die is half: 2496 "
        "cores x 2 x 875 MHz = 4.37 TFLOPS, 240 GB/s, 12 GiB, 150 W. Kepler has no FP16 "
        "arithmetic, so the FP16 rate repeats FP32.")
    yield Device(
        "p100-sxm2-16gb", "gpu", 10.6e12, 21.2e12, 732e9, 16 * _GiB, 300.0,
        "NVIDIA Tesla P100 datasheet (NVLink/SXM2 version): 10.6 TFLOPS FP32, 21.2 TFLOPS FP16, "
        "732 GB/s HBM2, 16 GB, 300 W.")
    yield Device(
        "v100-sxm2-16gb", "gpu", 15.7e12, 125e12, 900e9, 16 * _GiB, 300.0,
        "NVIDIA Tesla V100 datasheet (SXM2): 15.7 TFLOPS FP32, 125 TFLOPS tensor, 900 GB/s "
        "HBM2, 16 GB, 300 W.")
    yield Device(
        "v100-sxm2-32gb", "gpu", 15.7e12, 125e12, 900e9, 32 * _GiB, 300.0,
        "NVIDIA Tesla V100 datasheet (SXM2): 15.7 TFLOPS FP32, 125 TFLOPS tensor, 900 GB/s "
        "HBM2, 32 GB, 300 W.")
    yield Device(
        "v100-sxm3-32gb", "gpu", 15.7e12, 125e12, 900e9, 32 * _GiB, 350.0,
        "NVIDIA DGX-2 datasheet (2018): 16x Tesla V100 32 GB (SXM3), 2 PFLOPS tensor for the "
        "system = 125 TFLOPS per GPU, 512 GB HBM2 in all; V100 SXM: 15.7 TFLOPS FP32, 900 GB/s "
        "HBM2 (V100 datasheet). 350 W per SXM3 module (DGX-2 system architecture whitepaper).")
    yield Device(
        "a100-sxm4-40gb", "gpu", 19.5e12, 312e12, 1555e9, 40 * _GiB, 400.0,
        "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB): 19.5 TFLOPS FP32, 312 TFLOPS FP16 "
        "tensor (dense; 624 with sparsity), 1,555 GB/s HBM2, 400 W.")
    yield Device(
        "a100-sxm4-80gb", "gpu", 19.5e12, 312e12, 2039e9, 80 * _GiB, 400.0,
        "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): 19.5 TFLOPS FP32, 312 TFLOPS FP16 "
        "tensor (dense), 2,039 GB/s HBM2e, 400 W.")
    yield Device(
        "h100-sxm5-80gb", "gpu", 67e12, 989.5e12, 3.35e12, 80 * _GiB, 700.0,
        "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 67 TFLOPS FP32, 1,979 TFLOPS FP16 tensor "
        "with sparsity (989.5 dense), 3.35 TB/s HBM3, 80 GB, up to 700 W.")
    yield Device(
        "h200-sxm-141gb", "gpu", 67e12, 989.5e12, 4.8e12, 141 * _GiB, 700.0,
        "NVIDIA H200 Tensor Core GPU datasheet (SXM): 67 TFLOPS FP32, 1,979 TFLOPS FP16/BF16 "
        "tensor with sparsity (989.5 dense), 141 GB HBM3e at 4.8 TB/s, up to 700 W; NVLink "
        "900 GB/s.")
    yield Device(
        "b200-sxm-180gb", "gpu", 75e12, 2.25e15, 7.7e12, 180 * _GiB, 1000.0,
        "NVIDIA HGX B200 datasheet, per GPU (the 8-GPU board's figures / 8): FP32 600 / 8 = 75 "
        "TFLOPS; FP16/BF16 tensor 36 PFLOPS with sparsity / 8 = 4.5, dense 2.25 PFLOPS; 1.44 TB "
        "HBM3e / 8 = 180 GB at 62 TB/s / 8 = 7.7 TB/s; NVLink 5 1.8 TB/s per GPU; 1,000 W.")
    yield Device(
        "gb200-186gb", "gpu", 80e12, 2.5e15, 8.0e12, 186 * _GiB, 1200.0,
        "NVIDIA GB200 NVL72 specifications (72 Blackwell GPUs, 36 Grace CPUs), per GPU: "
        "FP16/BF16 tensor 360 PFLOPS with sparsity / 72 = 5, dense 2.5 PFLOPS; up to 13.4 TB "
        "HBM3e / 72 = 186 GB at 576 TB/s / 72 = 8 TB/s; NVLink 5 1.8 TB/s per GPU. FP32 80 "
        "TFLOPS per chip: S. Bekman, Machine Learning Engineering, "
        "compute/accelerator/README.md @744d01e1 (GB200 SXM row, 'per chip'; note 23: it 'runs "
        "the B200 chips a bit faster', maximum SM clock 2062 MHz against B200's 1965). 1,200 "
        "W per-GPU maximum power (Bekman's power table, after NVIDIA Mission Control's "
        "power-management FAQ).")
    yield Device(
        "b300-sxm-270gb", "gpu", 80e12, 2.25e15, 8.0e12, 270 * _GiB, 1000.0,
        "NVIDIA Blackwell Ultra (HGX / DGX B300), per GPU: dense FP16/BF16 2.25 PFLOPS, FP32 80 "
        "TFLOPS, HBM3e at 8 TB/s (S. Bekman, Machine Learning Engineering, "
        "compute/accelerator/README.md @744d01e1, B300 SXM rows, after the DGX B300 datasheet); "
        "270 GB as NVIDIA's MLPerf submissions name it (mlcommons inference_results_v6.0 "
        "closed/NVIDIA, system B300-SXM-270GBx8); 1,000 W maximum TGP (Bekman, after the DGX "
        "B300 power-capping guide).")
    yield Device(
        "gb300-288gb", "gpu", 80e12, 2.5e15, 8.0e12, 288 * _GiB, 1400.0,
        "NVIDIA GB300 NVL72 (Blackwell Ultra with Grace), per GPU: dense FP16/BF16 2.5 PFLOPS, "
        "FP32 80 TFLOPS, HBM3e at 8 TB/s (Bekman @744d01e1, GB300 SXM rows: 'the same' as GB200 "
        "but for FP4 and memory); 288 GB as NVIDIA's MLPerf submissions name it "
        "(GB300-NVL72_GB300-288GB_aarch64x72); 1,400 W per-GPU maximum power (Bekman's power "
        "table, after NVIDIA Mission Control's power-management FAQ).")
    yield Device(
        "gh200-96gb", "gpu", 67e12, 989.5e12, 4.0e12, 96 * _GiB, 1000.0,
        "NVIDIA GH200 Grace Hopper Superchip datasheet: the H100 GPU with 96 GB HBM3 at 4 TB/s "
        "(67 TFLOPS FP32, 989.5 TFLOPS FP16 tensor dense), NVLink-C2C 900 GB/s to the Grace "
        "CPU; module power configurable 450-1,000 W (the maximum here).")
    yield Device(
        "l40s-48gb", "gpu", 91.6e12, 362.05e12, 864e9, 48 * _GiB, 350.0,
        "NVIDIA L40S datasheet: 91.6 TFLOPS FP32, 733 TFLOPS FP16 tensor with sparsity (362.05 "
        "dense, FP32 accumulate), 48 GB GDDR6 at 864 GB/s, 350 W, PCIe Gen4 x16, no NVLink.")
    yield Device(
        "rtx-2080ti", "gpu", 13.45e12, 53.8e12, 616e9, 11 * _GiB, 250.0,
        "NVIDIA Turing GPU Architecture whitepaper (2018), GeForce RTX 2080 Ti reference: 4352 "
        "cores at 1545 MHz boost = 13.4 TFLOPS FP32, 107.6 TFLOPS FP16 tensor with FP16 "
        "accumulate / 53.8 with FP32 accumulate, 616 GB/s GDDR6, 11 GB, 250 W (Founders Edition "
        "260 W).")
    yield Device(
        "rtx-3090", "gpu", 35.6e12, 71e12, 936e9, 24 * _GiB, 350.0,
        "NVIDIA Ampere GA102 GPU Architecture whitepaper: GeForce RTX 3090, 35.6 TFLOPS FP32, "
        "142 TFLOPS FP16 tensor with FP16 accumulate / 71 with FP32 accumulate (dense), 936 GB/s "
        "GDDR6X, 24 GB, 350 W.")
    yield Device(
        "rtx-4090", "gpu", 82.6e12, 165.2e12, 1008e9, 24 * _GiB, 450.0,
        "NVIDIA Ada GPU Architecture whitepaper: GeForce RTX 4090, 82.6 TFLOPS FP32, 330.3 "
        "TFLOPS FP16 tensor with FP16 accumulate / 165.2 with FP32 accumulate (dense), "
        "1,008 GB/s GDDR6X, 24 GB, 450 W.")
    yield Device(
        "cpu-host", "cpu", 2.816e12, 2.816e12, 153.6e9, 512 * _GiB, 270.0,
        "Generic server host = 2x Intel Xeon E5-2698 v4 (the NVIDIA DGX-1 CPUs), Intel ARK: 20 "
        "cores at 2.2 GHz base, AVX2 with two FMA units (32 FP32 FLOP/cycle/core) = 1.41 TFLOPS "
        "per socket; 4 channels DDR4-2400 = 76.8 GB/s per socket; 135 W per socket. 512 GB as in "
        "the NVIDIA DGX-1 datasheet.")
    yield Device(
        "cpu-xeon-8168-2s", "cpu", 8.294e12, 8.294e12, 256e9, 1536 * _GiB, 410.0,
        "2x Intel Xeon Platinum 8168 (the NVIDIA DGX-2 CPUs; DGX-2 datasheet, 1.5 TB memory), "
        "Intel ARK: 24 cores at 2.7 GHz base, AVX-512 with two FMA units (64 FP32 "
        "FLOP/cycle/core) = 4.15 TFLOPS per socket; 6 channels DDR4-2666 = 128 GB/s per socket; "
        "205 W per socket.")
    yield Device(
        "cpu-epyc-7742-2s", "cpu", 9.216e12, 9.216e12, 409.6e9, 1024 * _GiB, 450.0,
        "2x AMD EPYC 7742 (the NVIDIA DGX A100 CPUs), AMD product page: 64 cores at 2.25 GHz base, "
        "two 256-bit FMA units (32 FP32 FLOP/cycle/core) = 4.6 TFLOPS per socket; 8 channels "
        "DDR4-3200 = 204.8 GB/s per socket; 225 W per socket. 1 TB as in the NVIDIA DGX A100 "
        "datasheet.")

    yield Device(
        "cpu-xeon-8480c-2s", "cpu", 14.336e12, 14.336e12, 614.4e9, 2048 * _GiB, 700.0,
        "2x Intel Xeon Platinum 8480C (the NVIDIA DGX H100 CPUs), NVIDIA DGX H100 datasheet: 56 "
        "cores per socket at 2.0 GHz base, 2 TB memory; AVX-512 with two FMA units (64 FP32 "
        "FLOP/cycle/core) = 7.17 TFLOPS per socket (AMX BF16 not counted); 8 channels DDR5-4800 "
        "= 307.2 GB/s per socket; 350 W per socket.")


    yield Device(
        "cpu-grace-72c", "cpu", 3.456e12, 3.456e12, 512e9, 480 * _GiB, 250.0,
        "NVIDIA Grace CPU as in the GH200 datasheet: 72 Arm Neoverse V2 cores, LPDDR5X up to "
        "480 GB at up to 512 GB/s. FP32 peak is not quoted by NVIDIA: 72 cores x 32 FLOP/cycle "
        "(Arm Neoverse V2: four 128-bit SVE2 FMA pipes) x 1.5 GHz, an assumed sustained clock. "
        "Power: the CPU share of the superchip, an assumption.")
    yield Device(
        "cpu-xeon-8570-2s", "cpu", 15.05e12, 15.05e12, 716.8e9, 2048 * _GiB, 700.0,
        "2x Intel Xeon Platinum 8570 (the NVIDIA DGX B200 CPUs; Intel ARK): 56 cores at 2.1 GHz "
        "base, AVX-512 with two FMA units (64 FP32 FLOP/cycle/core) = 7.5 TFLOPS per socket; 8 "
        "channels DDR5-5600 = 358.4 GB/s per socket; 350 W per socket; 2 TB as in the DGX B200 "
        "datasheet.")


DEVICES: dict[str, Device] = {device.name: device for device in _rows()}


def get_device(name: str) -> Device:
    """Return the preset called ``name``; an unknown name raises ConfigError listing them all."""
    if not isinstance(name, str) or name not in DEVICES:
        raise unknown_name("device", name, DEVICES)
    return DEVICES[name]


@dataclass(frozen=True)
class SocketLink:
    """The links that join the sockets of a two-socket host (Intel QPI or UPI).

    A GPU under one socket reaches a GPU or NIC under the other through them: PCIe up to its
    root complex, across the socket links, and down again (``nvidia-smi topo -m`` prints
    ``SYS`` for such a pair).

    Attributes
    ----------
    bandwidth_bytes_per_s : float
        Per direction, all links between the two sockets together: links x transfer rate x 2
        bytes (a QPI/UPI link carries 16 data bits per transfer each way).
    family : str
        The CPU generation as NVIDIA NCCL's topology code classes it (``ncclTopoCpuType``):
        ``"bdw"`` (Broadwell and older), ``"skl"`` (Skylake/Cascade Lake), ``"srp"`` (Sapphire
        Rapids), ``"erp"`` (Emerald Rapids); NCCL's achievable rate across the sockets follows it
        (:func:`simulator.library.nccl_constants.inter_cpu_GBps`).
    source : str
        Where the numbers come from.
    """

    bandwidth_bytes_per_s: float
    family: str
    source: str


#: Socket links of the two-socket CPU presets that have them: (links, GT/s, NCCL family, source).
#: Intel ARK for every row; AMD's Infinity Fabric rates are not published per link, so AMD
#: presets need ``socket_link_bandwidth`` given.
_SOCKET_ROWS = {
    "cpu-host": (2, 9.6, "bdw", "Xeon E5-2698 v4 (Broadwell-EP): 2 QPI links at 9.6 GT/s"),
    "cpu-xeon-8168-2s": (3, 10.4, "skl", "Xeon Platinum 8168 (Skylake-SP): 3 UPI at 10.4 GT/s"),
    "cpu-xeon-8480c-2s": (4, 16.0, "srp", "Xeon Platinum 8480+ (Sapphire Rapids; the 8480C is "
                          "its DGX variant): 4 UPI links at 16 GT/s"),
    "cpu-xeon-8570-2s": (4, 20.0, "erp", "Xeon Platinum 8570 (Emerald Rapids): 4 UPI at 20 GT/s"),
}
#: ``SocketLink`` per CPU preset: links x GT/s x 2 bytes per direction.
SOCKET_LINKS: dict[str, SocketLink] = {
    name: SocketLink(links * rate * 1e9 * 2, family, f"Intel ARK, {text}; 2 bytes per transfer "
                     f"per direction -> {links * rate * 2:g} GB/s")
    for name, (links, rate, family, text) in _SOCKET_ROWS.items()}


def socket_link(cpu: str) -> SocketLink | None:
    """The socket links of CPU preset ``cpu``, or None where the preset has no figure."""
    return SOCKET_LINKS.get(cpu)
