"""Published training-scaling tables gathered for issue 26 (tests/data/training/SOURCES.md),
compared with the presets a user would pick. Checks only: nothing in the model is fitted to
them."""

from pathlib import Path

import pandas as pd

from simulator.comparison.training import compare_training, select, summarise_training
from simulator.measure.schema import read_training
from simulator.topology import load_topology

DATA = Path(__file__).parent / "data" / "training"
NVDLE = DATA / "train_nvdle_mxnet_rn50_dgx_2021.csv"
HOROVOD = DATA / "train_horovod_readme_2017_ps_vs_allreduce.csv"
#: The Horovod README's first cluster: 4 servers x 4 Pascal GPUs on PCIe, one 25 Gb/s NIC each
#: (the README states no more; dgx1-p100 reshaped to it)
HOROVOD_25G = {"nodes": "4", "gpus_per_node": "4", "intra": "pcie", "nvlink_pairs": "null",
               "nics_per_node": "1", "nic_bandwidth": "25Gbps", "network": "ethernet"}


def test_nvidia_mxnet_resnet50_on_one_dgx1_scales_as_measured():
    """NVIDIA's MXNet ResNet-50 (Horovod, DALI, 1-8 GPUs of one DGX-1): within 3 % (1.0 % when
    this test was written)."""
    frame = select(read_training(NVDLE), ["hardware=DGX-1"])
    assert len(frame) == 8 and set(frame["gpus"]) == {1, 2, 4, 8}
    result = compare_training(frame, load_topology("dgx1-v100", {}))
    assert summarise_training(result)["overall"].iloc[0]["mape_pct"] < 3.0


def test_horovod_readme_16_gpus_nccl_over_roce():
    """Horovod's 2017 README, 16 GPUs on 25 Gb/s: NCCL over RoCE within 6 % (2.4 % when this
    test was written), and the 16-GPU speedup falls with the model's gradient bytes."""
    frame = select(read_training(HOROVOD), ["hardware=4 servers",
                                            "framework=NCCL 2 allreduce on GPU over RDMA"])
    graph = load_topology("dgx1-p100", {**HOROVOD_25G, "transport": "rdma"})
    result = compare_training(frame, graph)
    assert summarise_training(result)["overall"].iloc[0]["mape_pct"] < 6.0
    sixteen = result[result["gpus"] == 16].set_index("model")
    assert sixteen.loc["VGG16", "simulated_speedup"] < sixteen.loc["ResNet-101",
                                                                  "simulated_speedup"]


def test_horovod_readme_16_gpus_tensorflow_parameter_servers_placed_greedily():
    """The same table's TensorFlow parameter-server row for ResNet-101 (many variables, the
    'Distributed TensorFlow' row): with the variables placed greedily by bytes, as
    tf_cnn_benchmarks' parameter_server mode placed them, within 10 % (+3.7 % when this test
    was written; round-robin by layer left -39 %: every convolution on two of the four
    servers)."""
    frame = select(read_training(HOROVOD), ["hardware=4 servers", "framework=parameter servers",
                                            "model=ResNet-101"])
    frame = frame[~frame["framework"].str.contains("on CPU")].reset_index(drop=True)
    graph = load_topology("dgx1-p100", {**HOROVOD_25G, "transport": "tcp"})
    result = compare_training(frame, graph)
    many = result[result["gpus"] == 16]
    assert len(many) == 1
    assert abs(many["speedup_error_pct"].iloc[0]) < 10.0, many["speedup_error_pct"]


def test_horovod_readme_rows_that_summed_on_the_host_cpus_are_skipped_and_said():
    """'TCP Horovod (allreduce on CPU)' summed its gradients with MPI in host memory, which the
    simulator does not model: compare skips those rows with the reason instead of timing a GPU
    all-reduce for them (+34 to +480 % before), and simulates them when --algorithm asks."""
    frame = select(read_training(HOROVOD), ["hardware=4 servers", "framework=allreduce on CPU",
                                            "model=InceptionV3"])
    assert len(frame) == 4
    graph = load_topology("dgx1-p100", {**HOROVOD_25G, "transport": "tcp"})
    gpu_rows = select(read_training(HOROVOD), ["hardware=4 servers", "model=InceptionV3",
                                               "framework=NCCL 2 allreduce on GPU over TCP"])
    result = compare_training(pd.concat([frame, gpu_rows], ignore_index=True), graph)
    assert set(result["gpus"]) == {1, 16} and len(result) == 2
    skipped = result.attrs["skipped"]
    assert len(skipped) == 4 and all("host CPUs" in why for why in skipped)
    forced = compare_training(frame, graph, aggregation="ring")
    assert len(forced) == 4 and not forced.attrs.get("skipped")
