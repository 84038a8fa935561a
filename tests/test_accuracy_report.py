"""python -m benchmarks.accuracy: per-term errors, in/out-of-sample means, failed starts flagged."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_accuracy_report() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.accuracy"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    text = r.stdout
    for term in ("w", "act", "nt", "cg", "kv", "blk", "tok", "conc"):
        assert re.search(rf"^{term}\s", text, re.M), term
    kv = re.search(r"^kv\s+([\d.]+) % over.*?([\d.]+) % over.*?([\d.]+) % over", text, re.M)
    assert kv is not None
    all_kv, in_kv, out_kv = (float(x) for x in kv.groups())
    assert all_kv <= 2.0 and in_kv <= 2.0
    # out-of-sample: fourteen more 0.19 H100 setups of the same sweep (within 1.4 %) and the
    # vLLM >= 0.20 points (vllm-startup-047, gpt-oss-120b TP8 on a PCIe Blackwell card, 0.28.0:
    # +1.2 %, its weights 1.33 GiB under; vllm-startup-089, Qwen3-8B on an RTX A5000, 0.21.0:
    # -1.5 % with vLLM's CUDA-graph estimate structure; vllm-startup-049/051, Qwen3.6-35B-A3B
    # NVFP4 with images on an RTX 5090, 0.24.0: -2.0 / -2.5 % with FlashInfer's workspace in the
    # estimate's first FULL capture) are reported, not fitted on; 1.63 % until a cold
    # torch.compile boot joined (vllm-startup-171, Qwen3-8B on an RTX 4090, 0.27.1: +16.3 %, the
    # profile's peak ~1 GiB over its warm twin's, which the ledger does not model), 2.11 % since
    assert out_kv < 2.2
    flagged = re.search(r"failed starts flagged: (\d+)/(\d+)", text)
    assert flagged is not None and flagged.group(1) == flagged.group(2)
    assert " in  v1" in text and " out v1" in text
    assert "eleven replayable startup logs of vLLM >= 0.20" in text
    # issue 21's evidence: the >= 0.20 logs (by the log's own version) are counted, each has a
    # source URL, the replayable ones give the available-KV MAE, and each one that does not
    # replay names the term that blocks it
    ev = re.search(r"^  logs: (\d+), with a source URL: (\d+)$", text, re.M)
    assert ev is not None
    n_logs, n_urls = int(ev.group(1)), int(ev.group(2))
    assert n_logs >= 20 and n_urls == n_logs
    rep = re.search(r"^  replayable: (\d+) of (\d+)$", text, re.M)
    assert rep is not None and int(rep.group(2)) == n_logs
    mae = re.search(r"available-KV MAE on the replayable >= 0.20 logs: ([\d.]+) % over (\d+)", text)
    # a replayable log may log no available-KV figure (DeepSeek-V4 B200: concurrency only)
    assert mae is not None and 1 <= int(mae.group(2)) <= int(rep.group(1))
    # the MAE is the mean |error| of the replayable logs listed above it (vllm-startup-047,
    # gpt-oss-120b TP8 0.28.0, among them: out-of-sample, nothing fitted on it)
    kv_errs = [
        float(x)
        for x in re.findall(
            r"^    vllm-startup-\d+: available KV ([-+][\d.]+) %(?: \(\w+ torch.compile .*\))?$",
            text,
            re.M,
        )
    ]
    assert len(kv_errs) == int(mae.group(2)) >= 1
    assert "    vllm-startup-047: available KV " in text
    assert abs(sum(abs(x) for x in kv_errs) / len(kv_errs) - float(mae.group(1))) < 0.01
    # vLLM 0.27's summary line per term (cons: consumed memory, pk27: the peak it prints, the
    # transient peak plus the CUDA-graph estimate in the budget): the fused-MoE buffer is
    # persistent, so consumed memory holds it (engines/vllm.py::summary_line_split):
    # vllm-startup-167 consumed -0.71 %, peak -0.99 % (+130 % with the buffer in the peak)
    for col in ("cons", "pk27"):
        assert re.search(rf"^{col}\s", text, re.M), col
    head = re.search(r"^id .*$", text, re.M)
    assert head is not None
    cols = head.group(0).split()
    terms = cols[cols.index("tp/pp") + 1 :]  # the term columns follow tp/pp, in order
    for pid, cons_bound, pk_bound in (("167", 1.0, 2.0), ("173", 1.5, 10.0)):
        line = re.search(rf"^vllm-startup-{pid} .*$", text, re.M)
        assert line is not None
        fields = line.group(0).split()
        at = next(i for i, f in enumerate(fields) if re.fullmatch(r"\d+/\d+", f)) + 1
        got = dict(zip(terms, fields[at:], strict=False))
        assert abs(float(got["cons%"])) <= cons_bound, pid
        assert abs(float(got["pk27%"])) <= pk_bound, pid
    # a cold and a warm torch.compile boot of one endpoint (vllm-startup-171/173, Qwen3-8B TP1 on
    # an RTX 4090, 0.27.1, V2 runner, every term printed): the same but for the profile's peak
    # (1.18 GiB cold, 0.19 warm; the ledger 0.21): the warm one within 3.5 %; the cold one,
    # replayed cold (engines/vllm.py::cold_compile_bytes: 1.19 GiB), within 3.5 % too (+16.6 %
    # planned warm) and its printed peak within 2 %; the report says which boots are cold
    warm = re.search(r"^    vllm-startup-173: available KV ([-+][\d.]+) % \(warm ", text, re.M)
    cold = re.search(r"^    vllm-startup-171: available KV ([-+][\d.]+) % \(cold ", text, re.M)
    assert warm is not None and abs(float(warm.group(1))) <= 3.5
    assert cold is not None and abs(float(cold.group(1))) <= 3.5
    row171 = re.search(r"^vllm-startup-171 .*$", text, re.M)
    assert row171 is not None
    f171 = row171.group(0).split()
    at171 = next(i for i, f in enumerate(f171) if re.fullmatch(r"\d+/\d+", f)) + 1
    assert abs(float(dict(zip(terms, f171[at171:], strict=False))["pk27%"])) <= 2.0
    split = re.search(
        r"cold torch.compile: ([\d.]+) % over (\d+); the others \(warm, or not shown\): ([\d.]+) %"
        r" over (\d+)",
        text,
    )
    # the blog's Qwen3-32B runs (vllm-startup-161/163) are new containers with only the Hub's
    # cache mounted: the report counts them cold, as their launch shows
    launched = re.findall(
        r"^    (vllm-startup-\d+): available KV [-+][\d.]+ % \(cold torch.compile cache, as its"
        r" launch shows\)",
        text,
        re.M,
    )
    assert launched == ["vllm-startup-161", "vllm-startup-163"]
    assert split is not None and int(split.group(2)) + int(split.group(4)) == len(kv_errs)
    assert float(split.group(1)) > float(split.group(3))
    # the V2 runner's sampler state in vLLM 0.27's consumed budget: Qwen3-32B TP2 on two RTX PRO
    # 6000 (kubesimplify/website) -1.13 % (+6.4 % without it); its PP2 boot stays +20.8 % on
    # stage 0, ~1.45 GiB of a cold compile (README, Limits): issue 21's <= 2 % not met over all
    tp2 = re.search(r"^    vllm-startup-161: available KV ([-+][\d.]+) % \(cold ", text, re.M)
    assert tp2 is not None and abs(float(tp2.group(1))) <= 2.0
    # the 0.27.1 V1-runner boot of Qwen3-235B-A22B-Instruct-2507-FP8 (vllm-startup-167): replayed
    # with Qwen3-235B-A22B-FP8's config (the architecture its post quotes), the weights agree
    # (55.13 against the printed 55.19 GiB); its KV error is the consumed-memory gap (README)
    row = re.search(r"^vllm-startup-167 .* 4/1 +([-+][\d.]+) +— +— +— +([-+][\d.]+) ", text, re.M)
    assert row is not None and abs(float(row.group(1))) <= 0.5
    # its fused-MoE buffer from the code (1 GiB at any TP; engines/vllm.py::moe_workspace) and the
    # V1 runner's inputs_embeds buffer took the KV error from +4.48 to +1.52 %; the rest of its
    # consumed memory is not modelled
    assert abs(float(row.group(2))) <= 2.5
    # Gemma-4-31B-it BF16 on a B300, vLLM 0.26.0, the V1 runner by VLLM_USE_V2_MODEL_RUNNER=0
    # (vllm-startup-169, every term printed): weights, activation (with its 3-video encoder
    # profile), non-torch and KV
    g4 = re.search(
        r"^vllm-startup-169 .* 1/1 +([-+][\d.]+) +([-+][\d.]+) +([-+][\d.]+) +— +([-+][\d.]+) ",
        text,
        re.M,
    )
    assert g4 is not None
    w, act, nt, kv = (abs(float(x)) for x in g4.groups())
    assert w <= 0.5 and act <= 5.0 and nt <= 0.5 and kv <= 0.5
    for pid in ("vllm-startup-049", "vllm-startup-051"):  # FlashInfer's workspace: -2.0 / -2.5 %
        one = re.search(rf"^    {pid}: available KV ([-+][\d.]+) %$", text, re.M)
        assert one is not None and abs(float(one.group(1))) <= 3.0
    # FlashInfer's workspace in vLLM's printed estimate (0.20.0 RTX 5090 boots, not fitted on)
    boots = re.findall(
        r"^    out of sample cg-v-\d+ \(RTX-5090, FLASHINFER, .*\): logged ([\d.]+) GiB, "
        r"ledger ([\d.]+) ",
        text,
        re.M,
    )
    assert len(boots) == 5
    assert all(abs(float(a) - float(b)) <= 0.05 for a, b in boots)
    blocked = re.findall(r"^      (vllm-startup-\d+) \(vLLM [^)]*\): (\w+): ", text, re.M)
    assert len(blocked) == n_logs - int(rep.group(1))
    assert {term for _, term in blocked} <= {"model", "device", "version", "settings", "other"}
    # the RTX A5000 is in the catalog: Qwen3-8B on it (0.21.0) replays its budget
    assert "    vllm-startup-089: available KV " in text
    assert "vllm-startup-089" not in dict(blocked)
    # the NVFP4 MoE of issue 21's item 1 (6 GiB of KV where the plan said "cannot start")
    # replays with its encoder profile
    assert "    vllm-startup-049: available KV " in text
    assert "out-of-sample mean |error| per vLLM version band" in text
