import math

import pytest
import torch

from ampkit import number_format, number_formats
from ampkit.precision.float_formats import format_table


def test_known_facts_of_fp16_and_bf16():
    fp16, bf16 = number_format(torch.float16), number_format(torch.bfloat16)
    assert (fp16.max, fp16.exponent_bits, fp16.mantissa_bits) == (65504.0, 5, 10)
    assert (bf16.exponent_bits, bf16.mantissa_bits) == (8, 7)
    assert fp16.needs_loss_scaling and not bf16.needs_loss_scaling
    assert fp16.smallest_subnormal == 2.0**-24


@pytest.mark.parametrize("fmt", number_formats(), ids=lambda f: f.name)
def test_every_format_is_consistent_with_torch_rounding(fmt):
    dtype = getattr(torch, fmt.dtype)
    assert fmt.bits == 1 + fmt.exponent_bits + fmt.mantissa_bits
    # the largest value is representable; the smallest subnormal survives, half of it does not
    assert torch.tensor(fmt.max).to(dtype).float().item() == fmt.max
    assert torch.tensor(fmt.smallest_subnormal).to(dtype).float().item() == fmt.smallest_subnormal
    assert torch.tensor(fmt.smallest_subnormal * 0.49).to(dtype).float().item() == 0.0
    assert torch.tensor(1.0 + fmt.eps).to(dtype).float().item() > 1.0
    assert torch.tensor(1.0 + fmt.eps * 0.49).to(dtype).float().item() == 1.0
    assert fmt.decimal_digits == pytest.approx((fmt.mantissa_bits + 1) * math.log10(2), abs=0.01)


def test_fp8_formats_present_on_this_torch():
    names = [f.name for f in number_formats()]
    assert names[:3] == ["fp32", "fp16", "bf16"]
    assert {"fp8_e4m3", "fp8_e5m2"} <= set(names)
    e4m3 = number_format(torch.float8_e4m3fn)
    assert e4m3.max == 448.0 and not e4m3.has_inf


def test_table_has_a_row_per_format():
    table = format_table(number_formats()).splitlines()
    assert len(table) == 2 + len(number_formats())
    assert table[0].split()[0] == "format"
