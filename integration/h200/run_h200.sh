#!/usr/bin/env bash
# SGLang 0.5.17 on the H200 with our adapters, in one device call. Build the bundle here first
# (PyPI needed; see integration/README.md):
#     bash /work/shared/recipes/sglang-h200/build_bundle.sh $PWD/.sglbundle   # git-ignored folder
# then on the device, from the repository root, carrying .sglbundle:
#     bash integration/h200/run_h200.sh .sglbundle
# Steps (logs and JSON under $OUT):
#   kit     SGLang's attention kit on CUDA: backend "hpc" (our decode kernel; extend on triton) and
#           "triton", eager, and the kit's CUDA-graph decode mode (capture + replay) for both;
#   ops     the vLLM adapter's cache view and decode / MoE / router calls on vLLM-shaped inputs,
#           kernels against the operators' references (vLLM itself does not fit the machine);
#   layer   SGLang's own Qwen3-MoE / Qwen3 attention layers, one decode step with the fused prologue
#           (qk_norm_rope_store kernel + decode) and with SGLang's norm / rope / KV write, BF16 and
#           FP8 KV, against float64 (tests/integration/scripts/sglang_prologue_layer.py);
#   engine  the tiny Qwen3-MoE (head dim 128) through sglang.Engine: default backends (CUDA graphs),
#           ours (attention hpc with the fused prologue + MoE runner) without and with CUDA graphs,
#           and ours with the gates in FP32 through the router GEMM and the prologue switched off
#           (HPC_SGLANG_PROLOGUE=0; CUDA graphs);
#   compare same greedy tokens ours vs default, per-token logprobs within tolerance, every
#           run repeatable, and the operator calls and prologue path seen in the logs.
#   sglstep (not in the default STEPS) the decode-step table through SGLang's own model runner
#           (integration/h200/decode_step_sglang.py): one process per model (SGL_MODELS, default
#           "qwen3_30b_a3b hy3_tp8") and provider (sglang_triton, ours), then its combine into
#           $OUT/sglang_step.json / .md and the line "sglstep: PASS|FAIL" ($OUT/sglstep.txt);
# STEPS="kit ops layer engine" (default) picks steps; T_KIT / T_OPS / T_LAYER / T_ENGINE / T_SGLSTEP
# are per-step timeouts (s).
# The last line printed is the verdict ("h200 integration: PASS" or "FAIL: ...").
set -uo pipefail
B=$(cd "${1:?usage: run_h200.sh BUNDLE_DIR}" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/h200out}; mkdir -p "$OUT"
H=integration/h200
T0=$(date +%s)
rm -rf /tmp/site && mkdir -p /tmp/site
for f in "$B"/*.tar.xz; do tar -xJf "$f" -C /tmp/site || echo "UNPACK FAIL $f"; done
EP=$(mktemp -d /tmp/hpc_entry_points.XXXXXX)
python3 tools/dev_entry_points.py "$EP" >/dev/null  # our dist-info (hpc_ops.* and sglang.srt.plugins entry points)
export PYTHONPATH="$EP:/tmp/site:$ROOT/packages/hpc-common/src:$ROOT/packages/hpc-attention/src:$ROOT/packages/hpc-router-gemm/src:$ROOT/packages/hpc-moe/src:$ROOT/integration/src"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export HPC_JIT_CACHE_DIR=${HPC_JIT_CACHE_DIR:-/tmp/hpc_jit}
echo "unpacked in $(( $(date +%s) - T0 ))s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 tests/integration/scripts/make_tiny_qwen3_moe.py /tmp/tinymoe > "$OUT/make_tiny.log" 2>&1 || echo "make_tiny FAIL"

step() { # name timeout cmd...
  local n=$1 t=$2; shift 2; local s=$(date +%s)
  timeout -k 10 "$t" "$@" > "$OUT/$n.log" 2>&1; local rc=$?
  echo "=== step $n rc=$rc $(( $(date +%s) - s ))s"; grep -E "hpc-integration|Traceback|Error" "$OUT/$n.log" | head -8
  tail -n 4 "$OUT/$n.log" | cut -c1-300
  return $rc
}
STEPS=${STEPS:-"kit ops layer engine"}
for s in $STEPS; do
  case $s in
    kit) step kit ${T_KIT:-240} python3 tests/integration/scripts/sglang_attention_kit.py "$OUT/kit.json" cuda 128 hpc,triton 1 ;;
    ops) step ops ${T_OPS:-240} python3 $H/vllm_shaped.py "$OUT/ops.json" ;;
    layer) step layer ${T_LAYER:-150} python3 tests/integration/scripts/sglang_prologue_layer.py "$OUT/layer.json" cuda ;;
    engine)
      for run in default:graph ours:nograph ours:graph ours_fp32router:graph; do
        mode=${run%%:*}; g=${run##*:}
        step "engine_${mode}_$g" ${T_ENGINE:-150} python3 $H/engine_tokens.py /tmp/tinymoe "$mode" "$g" "$OUT/engine_${mode}_$g.json"
      done ;;
    sglstep)
      for m in ${SGL_MODELS:-qwen3_30b_a3b hy3_tp8}; do
        for p in sglang_triton ours; do
          step "sglstep_${m}_$p" ${T_SGLSTEP:-120} python3 $H/decode_step_sglang.py run --provider $p --model $m --out "$OUT/sglstep/${m}_$p.json"
        done
      done
      python3 $H/decode_step_sglang.py combine "$OUT/sglstep" --out "$OUT" 2>&1 | tee "$OUT/sglstep.txt" ;;
  esac
done
python3 $H/compare.py "$OUT" | tee "$OUT/verdict.txt"
echo "total $(( $(date +%s) - T0 ))s"
