from pathlib import Path

import torch

from ampkit.precision.hardware import cpu_has_native_bf16, probe, read_cpu_flags


def test_avx512_bf16_counts_as_native():
    assert cpu_has_native_bf16({"avx2", "avx512f", "avx512_bf16"})


def test_amx_counts_as_native():
    assert cpu_has_native_bf16(["amx_tile", "amx_bf16"])


def test_avx2_only_is_not_native():
    assert not cpu_has_native_bf16({"sse4_2", "avx2", "fma", "f16c"})


def test_read_cpu_flags_parses_first_flags_line(tmp_path: Path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu avx2 avx512_bf16\n\n"
        "processor\t: 1\nflags\t\t: fpu\n"
    )
    assert read_cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}


def test_read_cpu_flags_missing_file_is_empty(tmp_path: Path):
    assert read_cpu_flags(tmp_path / "nope") == frozenset()


def test_probe_cpu_agrees_with_flags_of_this_machine():
    info = probe(torch.device("cpu"))
    flags = read_cpu_flags()
    if flags:
        assert info.cpu_native_bf16 == cpu_has_native_bf16(flags)
    assert info.cuda_capability is None
