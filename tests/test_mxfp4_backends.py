"""gpt-oss MXFP4 expert bytes by the MoE backend vLLM picks per GPU and version (issue 21 N7).

The backend (engines/vllm.py::mxfp4_moe_backend) and its rounding (engines/vllm.py::
mxfp4_layout, ledger/weights.py::Mxfp4Layout) as read in vLLM 0.20.0 and 0.24.0–0.28.0
(fused_moe/oracle/mxfp4.py::select_mxfp4_moe_backend, _get_priority_backends_for_gpt_oss,
mxfp4_round_up_hidden_size_and_intermediate_size; quantization/mxfp4.py::
GptOssMxfp4MoEMethod.create_weights; quantization/utils/mxfp4_utils.py::_swizzle_mxfp4).

Per expert, per rank (H hidden, I the per-partition intermediate size, both rounded):
w13 = 2I·H/2 values + 2I·H/32 E8M0 scales, w2 = H·I/2 + H·I/32. Triton on Hopper keeps the
same values (rows padded to 16 and packed bytes to 32: no-ops on gpt-oss) and re-lays the scales
with rows padded to 256 and groups to 2 (first to 4 from 0.26); 0.20–0.24 keep the checkpoint
scales beside the swizzled ones.
"""

from __future__ import annotations

import pytest

from inference_capacity.engines.versions import parse_version
from inference_capacity.engines.vllm import (
    EngineSettings,
    SettingsError,
    mxfp4_layout,
    mxfp4_moe_backend,
    predict_startup,
)
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger.weights import weight_breakdown
from inference_capacity.model import load_model

A100, H100, B200 = "A100-SXM-80GB", "H100-SXM-80GB", "B200-180GB"
RTX_PRO = "RTX-PRO-4500-Blackwell"  # SM120


def _v(s: str):  # type: ignore[no-untyped-def]
    return parse_version(s)


@pytest.mark.parametrize(
    ("gpu", "backend"),
    [(A100, "marlin"), (H100, "triton"), (B200, "trtllm"), (RTX_PRO, "marlin")],
)
@pytest.mark.parametrize("version", ["0.20.0", "0.24.0", "0.28.0"])
def test_backend_by_compute_capability(gpu: str, backend: str, version: str) -> None:
    # SM80 and SM120 fail the TRTLLM family (100) and Triton window (9.0 <= cc < 11.0) checks
    # and CUTLASS-BF16's is_device_capability(90): Marlin (has_device_capability(7.5))
    assert mxfp4_moe_backend(_v(version), get_gpu(gpu).name) == backend


def _bias_bytes(model: str, tp: int) -> int:
    """bf16 w13_bias (E × 2I/tp) and replicated w2_bias (E × H), every layer."""
    m = load_model(model)
    e, h, layers = (128, 2880, 36) if "120b" in model else (32, 2880, 24)
    assert m.hidden_size == h and m.num_layers == layers
    return (2 * 2880 // tp + h) * e * 2 * layers


def _experts(model: str, tp: int, version: str, gpu: str) -> int:
    m = load_model(model)
    layout = mxfp4_layout(_v(version), get_gpu(gpu).name)
    w = weight_breakdown(m, tp, 1, 0, 2, m.quantization, mxfp4=layout)
    return w.by_group["experts"] - _bias_bytes(model, tp)


# gpt-oss-120b TP8: I = 2880 / 8 = 360 per partition, 128 experts x 36 layers = 4608 per rank.
#  Marlin (and TRTLLM from 0.27): H 3072, I round_up(360, 128) = 384:
#    w13 2·384·1536 + 2·384·96 = 1,253,376; w2 3072·192 + 3072·12 = 626,688
#    -> 1,880,064 x 4608 = 8,663,334,912
#  TRTLLM 0.20–0.26: I round_up(360, 256) = 512: 1,671,168 + 835,584 = 2,506,752 x 4608
#    = 11,551,113,216
#  Triton 0.28: H 2880, I round_up(360, 64) = 384: values 768·1440 + 2880·192 = 1,658,880;
#    scales w13 768 x round_up(round_up(90, 4), 2) = 768·92 = 70,656, w2 round_up(2880, 256)
#    = 3072 x 12 = 36,864 -> 1,766,400 x 4608 = 8,139,571,200
#  Triton 0.24: groups 90 (no pre-pad): 768·90 + 3072·12 = 105,984 swizzled + the kept
#    768·90 + 2880·12 = 103,680 -> 1,868,544 x 4608 = 8,610,250,752
# gpt-oss-20b TP1: I 2880, 32 experts x 24 layers = 768.
#  Marlin / TRTLLM 0.28: H 3072, I 2944: 9,609,216 + 4,804,608 = 14,413,824 x 768
#    = 11,069,816,832
#  TRTLLM 0.25: I 3072: 10,027,008 + 5,013,504 = 15,040,512 x 768 = 11,551,113,216
#  Triton 0.28: I 2880 (a multiple of 64): values 5760·1440 + 2880·1440 = 12,441,600; scales
#    5888·92 + 3072·92 = 824,320 -> 13,265,920 x 768 = 10,188,226,560
@pytest.mark.parametrize(
    ("model", "tp", "version", "gpu", "expected"),
    [
        ("openai/gpt-oss-120b", 8, "0.28.0", A100, 8_663_334_912),
        ("openai/gpt-oss-120b", 8, "0.28.0", RTX_PRO, 8_663_334_912),
        ("openai/gpt-oss-120b", 8, "0.28.0", B200, 8_663_334_912),
        ("openai/gpt-oss-120b", 8, "0.25.0", B200, 11_551_113_216),
        ("openai/gpt-oss-120b", 8, "0.28.0", H100, 8_139_571_200),
        ("openai/gpt-oss-120b", 8, "0.24.0", H100, 8_610_250_752),
        ("openai/gpt-oss-20b", 1, "0.28.0", A100, 11_069_816_832),
        ("openai/gpt-oss-20b", 1, "0.28.0", B200, 11_069_816_832),
        ("openai/gpt-oss-20b", 1, "0.25.0", B200, 11_551_113_216),
        ("openai/gpt-oss-20b", 1, "0.28.0", H100, 10_188_226_560),
    ],
)
def test_expert_bytes_per_rank(model: str, tp: int, version: str, gpu: str, expected: int) -> None:
    assert _experts(model, tp, version, gpu) == expected


def test_rounding_is_per_partition() -> None:
    # TP8 Marlin: 360 -> 384 per rank, not the full 2880 -> 2944 split (368): 16 more columns
    # of I per expert; 0.28 on the RTX PRO (SM120) sees it through the predictor
    m = load_model("openai/gpt-oss-120b")
    g = get_gpu(RTX_PRO)
    p = predict_startup(m, g.total_bytes, g.name, 8, 1, EngineSettings("0.28.0"))
    assert p.ranks[0].weights.by_group["experts"] == 8_663_334_912 + _bias_bytes(
        "openai/gpt-oss-120b", 8
    )


def test_sm110_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # SM110 (Thor): outside the TRTLLM family and the Triton window, not derived here
    from inference_capacity.engines import vllm

    monkeypatch.setattr(vllm, "_compute_capability", lambda name: (11, 0))
    with pytest.raises(SettingsError, match="SM110"):
        mxfp4_moe_backend(_v("0.28.0"), "Thor")
