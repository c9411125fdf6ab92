"""Each precision mode's hooks on a small model, the registry, and the one precision parser."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ampkit
from ampkit import ConfigurationError, MixedPrecision, PrecisionWarning, parse_precision
from ampkit.precision.bf16_true import CompensatedOptimizer, to_bf16_true
from ampkit.precision.hardware import HardwareInfo
from ampkit.precision.modes import MODES, TrainingSetup, precision_mode
from ampkit.precision.policy import resolve_precision

H100 = HardwareInfo(
    device=torch.device("cuda", 0),
    name="H100",
    cuda_capability=(9, 0),
    cuda_bf16=True,
    torchao_available=True,
)
V100 = HardwareInfo(
    device=torch.device("cuda", 0), name="V100", cuda_capability=(7, 0), cuda_bf16=False
)


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 32), nn.Linear(32, 4)
    )


def _batches(n: int = 5) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(n)]


# -- the parser ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelled", "precision", "recipe"),
    [
        ("auto", "auto", None),
        (" BF16-Mixed ", "bf16", None),
        ("16-mixed", "fp16", None),
        ("32-true", "fp32", None),
        ("bf16-true", "bf16-true", None),
        ("fp8", "fp8", "tensorwise"),
        ("fp8-rowwise-gw-hp", "fp8", "rowwise_with_gw_hp"),
    ],
)
def test_parse_precision_reads_every_spelling(spelled, precision, recipe):
    parsed = parse_precision(spelled)
    assert (parsed.precision, parsed.fp8_recipe, parsed.spelled) == (precision, recipe, spelled)


def test_parse_precision_refuses_an_unknown_name_with_the_closest_one():
    with pytest.raises(ConfigurationError, match="Did you mean 'bf16-true'"):
        parse_precision("bf16-tru")


# -- the registry ----------------------------------------------------------------------------


def test_every_canonical_precision_has_its_mode_class():
    assert {name: cls.__name__ for name, cls in MODES.items()} == {
        "fp32": "Fp32",
        "fp16": "Mixed",
        "bf16": "Mixed",
        "bf16-true": "Bf16True",
        "fp8": "Fp8",
    }
    for name in ("fp32", "fp16", "bf16", "bf16-true"):
        mode = precision_mode(name)
        assert mode.name == name and not mode.bound


def test_a_policy_gives_a_bound_mode_with_its_options():
    policy = resolve_precision("bf16-true", "cpu")
    mode = precision_mode(policy, update_compensation="stochastic", keep_fp32=())
    assert isinstance(mode, ampkit.Bf16True) and mode.policy is policy
    assert (mode.update_compensation, mode.keep_fp32) == ("stochastic", ())
    fp8 = precision_mode(resolve_precision("fp8-rowwise", "cpu", emulate=True))
    assert isinstance(fp8, ampkit.Fp8) and (fp8.recipe, fp8.emulate) == ("rowwise", True)


def test_an_option_of_another_mode_is_refused_naming_its_owner():
    with pytest.raises(
        ConfigurationError,
        match=r"plan: given, but the precision is bf16-true; it applies to fp8 only",
    ):
        precision_mode("bf16-true", plan=object())
    with pytest.raises(ConfigurationError, match="given next to the mode object"):
        precision_mode(ampkit.Bf16True(), update_compensation="kahan")
    with pytest.raises(ConfigurationError, match="'auto' is decided by the hardware"):
        precision_mode("auto")


def test_a_mode_class_refuses_a_precision_of_another_mode():
    with pytest.raises(ConfigurationError, match="Mixed trains in 'fp16', 'bf16', not 'fp8'"):
        ampkit.Mixed("fp8")
    with pytest.raises(ConfigurationError, match="recipe: 'colwise' is unknown"):
        ampkit.Fp8("colwise")
    with pytest.raises(
        ConfigurationError, match="trains in bf16, but the policy given is for fp32"
    ):
        ampkit.Mixed("bf16").bind(resolve_precision("fp32", "cpu"))


def test_a_mode_belongs_to_one_run():
    mode = ampkit.Mixed("bf16")
    MixedPrecision(mode, "cpu")
    assert mode.policy.device == torch.device("cpu")
    with pytest.raises(ConfigurationError, match="already belongs to a run"):
        mode.bind(resolve_precision("bf16", hardware=H100))


# -- fp32 ------------------------------------------------------------------------------------


def test_fp32_mode_engine_is_bitwise_the_plain_loop():
    plain, engine_model = _mlp(), _mlp()
    opt = torch.optim.AdamW(plain.parameters(), lr=1e-2)
    for x, y in _batches():
        nn.functional.mse_loss(plain(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    with MixedPrecision(ampkit.Fp32(), "cpu") as mp:
        assert isinstance(mp.mode, ampkit.Fp32) and mp.policy.precision == "fp32"
        model = mp.prepare_model(engine_model)
        opt2 = mp.prepare_optimizer(torch.optim.AdamW(model.parameters(), lr=1e-2))
        assert model is engine_model and isinstance(opt2, torch.optim.AdamW)
        for x, y in _batches():
            with mp.autocast():
                loss = nn.functional.mse_loss(model(x), y)
            mp.backward(loss)
            mp.step(opt2)
    for a, b in zip(plain.parameters(), engine_model.parameters(), strict=True):
        assert torch.equal(a, b)


# -- mixed -----------------------------------------------------------------------------------


def test_mixed_modes_autocast_in_their_dtype_and_only_fp16_scales():
    bf16 = MixedPrecision(ampkit.Mixed("bf16-mixed"), "cpu")
    assert (bf16.policy.compute_dtype, bf16.policy.uses_scaler) == (torch.bfloat16, False)
    assert not bf16.scaler.is_enabled()
    with bf16.autocast():
        assert nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16
    fp16 = ampkit.Mixed("fp16").bind(resolve_precision("fp16", hardware=V100))
    assert fp16.policy.uses_scaler and fp16.policy.compute_dtype == torch.float16
    assert fp16.compile_default(None) is False and fp16.result_fields() == {}


# -- bf16-true -------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [None, (), ["3"], [nn.LayerNorm]])
def test_bf16_true_prepare_casts_exactly_what_to_bf16_true_casts(keep):
    control = _mlp()
    to_bf16_true(control, keep)
    mode = MixedPrecision(ampkit.Bf16True(keep_fp32=keep), "cpu").mode
    model = mode.prepare_model(_mlp())
    assert [(n, p.dtype) for n, p in model.named_parameters()] == [
        (n, p.dtype) for n, p in control.named_parameters()
    ]
    for a, b in zip(model.parameters(), control.parameters(), strict=True):
        assert torch.equal(a, b)


def test_bf16_true_keeps_the_runs_fp32_islands_on_top_of_its_defaults():
    mode = MixedPrecision("bf16-true", "cpu").mode
    model = _mlp()
    assert mode.setup_training(TrainingSetup(model, keep_fp32=("0",))) == []
    mode.prepare_model(model)
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    # "0" is the island; LayerNorm "1" and the final projection "4" are the defaults
    assert [dtypes[f"{i}.weight"] for i in (0, 1, 3, 4)] == [
        torch.float32,
        torch.float32,
        torch.bfloat16,
        torch.float32,
    ]


def test_bf16_true_measures_lost_updates_on_a_logged_step_and_reports_them():
    with pytest.warns(PrecisionWarning, match="update_compensation='none'"):
        mp = MixedPrecision(ampkit.Bf16True(update_compensation="none", keep_fp32=()), "cpu")
    model = mp.prepare_model(nn.Linear(16, 4, bias=False))
    with torch.no_grad():
        model.weight.fill_(1.0)
    opt = mp.prepare_optimizer(torch.optim.SGD(model.parameters(), lr=1e-7))
    assert isinstance(opt, CompensatedOptimizer) and opt.compensation == "none"
    names = {id(model.weight): "weight"}
    x, y = _batches(1)[0]
    with mp.autocast():
        mp.backward(nn.functional.mse_loss(model(x).float(), y))
    mp.step(opt)
    assert mp.mode.step_metrics(opt, step=1, names=names) == {}  # not measured
    with mp.autocast():
        mp.backward(nn.functional.mse_loss(model(x).float(), y))
    mp.mode.measure_next_step(opt)
    mp.step(opt)
    with pytest.warns(PrecisionWarning, match=r"at step 2, 100\.0% of the intended"):
        assert mp.mode.step_metrics(opt, step=2, names=names) == {
            "lost_updates": 1.0,
            "lost_state_updates": 0.0,  # the default state is fp32: nothing rounded
        }
    assert mp.mode.result_fields() == {
        "update_compensation": "none",
        "lost_updates": 1.0,
        "state_precision": "fp32",
        "lost_state_updates": 0.0,
    }


# -- fp8 (emulated on the CPU) ---------------------------------------------------------------


def test_fp8_compiles_by_default_on_cuda_only():
    cpu = MixedPrecision(ampkit.Fp8(emulate=True), "cpu").mode
    assert cpu.compile_default(None) is False
    gpu = ampkit.Fp8().bind(resolve_precision("fp8", hardware=H100))
    assert gpu.compile_default(None) is True
    with pytest.warns(PrecisionWarning, match="eager fp8 runs separate cast"):
        assert gpu.compile_default(False) is False


def test_fp8_plans_from_the_first_batch_leaves_islands_out_and_converts_the_plan():
    pytest.importorskip("torchao.float8")
    from ampkit.precision.fp8 import fp8_layer_names

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Linear(64, 16))
    x = torch.randn(24, 32)
    calls = []

    def closure() -> torch.Tensor:
        calls.append(1)
        return model(x).pow(2).mean()

    mp = MixedPrecision(ampkit.Fp8(emulate=True), "cpu")
    notes = mp.mode.setup_training(TrainingSetup(model, closure=closure, keep_fp32=("2",)))
    plan = mp.mode.plan
    assert len(calls) == 1 and [d.tokens for d in plan.layers] == [24, 24, 24]
    assert notes == [
        "fp8 (tensorwise): 0 of 3 Linear layers converted (shape rules and torchao's size prior)"
    ]
    assert {d.name: d.reason for d in plan.layers}["2"] != "kept in fp32 (keep_fp32)"  # not fp8
    # a plan that selects every layer: the island is taken out, the rest converted
    every = ampkit.fp8_plan(model, closure=closure, use_size_prior=False)
    mode = MixedPrecision(ampkit.Fp8(plan=every, emulate=True), "cpu").mode
    mode.setup_training(TrainingSetup(model, closure=closure, keep_fp32=("2",)))
    assert len(calls) == 2  # a given plan is not measured again
    assert {d.name: d.reason for d in mode.plan.layers}["2"] == "kept in fp32 (keep_fp32)"
    mode.prepare_model(model)
    assert fp8_layer_names(model) == ["0", "3"]


def test_fp8_refuses_a_plan_of_another_recipe():
    plan = ampkit.fp8_plan(nn.Sequential(nn.Linear(16, 16)), recipe="rowwise")
    with pytest.raises(ConfigurationError, match="made for the rowwise recipe"):
        ampkit.Fp8("tensorwise", plan=plan)
    assert ampkit.Fp8("rowwise", plan=plan).spelling == "fp8-rowwise"


# -- the engine delegates ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keyword", "value", "mode", "option"),
    [
        ("update_compensation", "stochastic", "Bf16True", "update_compensation"),
        ("bf16_true_keep_fp32", ("0",), "Bf16True", "keep_fp32"),
        ("bf16_true_state_precision", "bf16-stochastic", "Bf16True", "state_precision"),
    ],
)
def test_an_old_engine_keyword_warns_with_the_mode_object_and_goes_into_the_mode(
    keyword, value, mode, option
):
    new_form = rf"MixedPrecision\(precision=ampkit\.{mode}\({option}=\.\.\.\)\)"
    with pytest.warns(
        DeprecationWarning, match=rf"MixedPrecision\({keyword}=\.\.\.\) is deprecated.*{new_form}"
    ):
        mp = MixedPrecision("bf16-true", "cpu", **{keyword: value})
    assert type(mp.mode).__name__ == mode and getattr(mp.mode, option) == value


def test_the_old_fp8_plan_keyword_warns_and_becomes_the_plan():
    model = nn.Sequential(nn.Linear(32, 32))
    plan = ampkit.fp8_plan(model, measure=False)
    with pytest.warns(DeprecationWarning, match=r"ampkit\.Fp8\(plan=\.\.\.\)"):
        mp = MixedPrecision(resolve_precision("fp8", "cpu", emulate=True), fp8_plan=plan)
    assert mp.mode.plan is plan


def test_an_unknown_engine_keyword_is_a_type_error_with_the_closest_spelling():
    with pytest.raises(
        ampkit.KeywordError,
        match="unexpected keyword argument 'max_grad_nrom'. Did you mean max_grad_norm?",
    ):
        MixedPrecision("fp32", "cpu", max_grad_nrom=1.0)


def test_the_engine_puts_the_mode_options_into_the_mode_and_refuses_them_for_another():
    mp = MixedPrecision(ampkit.Bf16True(update_compensation="stochastic"), "cpu")
    assert isinstance(mp.mode, ampkit.Bf16True) and mp.mode.update_compensation == "stochastic"
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ConfigurationError, match="keep_fp32: given, but the precision is fp32"),
    ):
        MixedPrecision("fp32", "cpu", bf16_true_keep_fp32=())
    assert mp.state_dict().keys() == {"precision", "grad_accum_steps", "micro_step", "scaler"}
