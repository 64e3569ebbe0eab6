#!/usr/bin/env bash
# One call on a GPU machine: GPU tests and decode benchmarks, each step under its own time limit,
# logs and JSON under $OUT (or ./gpu-out). Wheels for packages the machine lacks (fla-core,
# nvidia-modelopt and its pure-Python needs) are installed from ./.whl when that folder exists
# (benchmarks/fetch_wheels.sh fills it; name .whl in the device call's carry list).
#
#   bash benchmarks/run_gpu_suite.sh [STEP ...]      steps run in the order given
#   steps: tests (pytest -m gpu), formats (compiled format device functions), builder (default
#          build on CUDA), bench (mamba2, gdn, kda decode benchmarks), bench-mamba2 (its table
#          alone; MAMBA2_BENCH_ARGS="--ring-dt-layout entries" for that state), paper (the paper's public
#          Mamba-2 and GDN kernels beside ours; PAPER_ROOT: a checkout of its repository inside
#          the working tree, untracked), options-tests / options-nonflush / parts / options-flush /
#          options-stream-tiles (the Mamba-2 step options and probes: their GPU tests, each option
#          against the default, the step's parts), l2-flush (what each L2 flush form leaves to the
#          timed replay; the Mamba-2 target batches under both), options-ws-l2 (the flush's L2
#          prefetch of its next item), ws-l2-default (the flush default against the forty-eighth
#          run's), ws-l2-prefetch (the flush default with and without that prefetch;
#          ws-l2-prefetch-nano: its flush steps at Nemotron-3-Nano dims), device-launch (a grid
#          launched from the device inside a graph), ws-consumers (the flush with 16 / 8 / 4
#          consumer warps), fold-counter (the fold alone as a grid, a
#          counter-fed wave and a warp-specialised wave), clocks (the GPU's clocks and power while the
#          all-flush step and the plain table run), clocks-consumers (the all-flush step with 16 and
#          8 consumer warps, clocks sampled), clocks-fold (the fold alone in four forms and the
#          standard step, power sampled); default: tests formats bench builder
#   limits (seconds) and extra benchmark arguments come from the environment:
#   GPU_TESTS_LIMIT GPU_TESTS_WORKERS GPU_TESTS_ARGS FORMATS_LIMIT BUILDER_LIMIT BENCH_LIMIT
#   MAMBA2_BENCH_ARGS GDN_BENCH_ARGS KDA_BENCH_ARGS PAPER_ROOT
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
python3 - <<'PY' | tee "$OUT/versions.txt"
import torch, triton
print(f"gpu={torch.cuda.get_device_name()} torch={torch.__version__} cuda={torch.version.cuda} triton={triton.__version__}")
PY
status=0
step() {  # step NAME SECONDS CMD...: run CMD under a time limit, log to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name rc=$rc in $((SECONDS - t0))s"
  [ "$rc" = 0 ] || status=1
}
# nvidia-smi sampling every 50 ms into $OUT/clocks.csv (SM and memory clocks, power, temperatures,
# clock-event reasons), each part's start marked in $OUT/clock_marks.txt; the stop prints each
# part's clocks and power (benchmarks/gpu_clocks.py).
mark() { echo "$(date '+%Y/%m/%d %H:%M:%S.%N') $1" >> "$OUT/clock_marks.txt"; }
clock_sampler_start() {
  local reasons=clocks_event_reasons.active
  nvidia-smi --query-gpu=$reasons --format=csv >/dev/null 2>&1 || reasons=clocks_throttle_reasons.active
  nvidia-smi --query-gpu=power.limit,enforced.power.limit,clocks.max.sm,clocks.max.mem --format=csv \
    | tee "$OUT/clock_limits.txt"
  : > "$OUT/clock_marks.txt"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,$reasons \
    --format=csv,noheader,nounits -lms 50 > "$OUT/clocks.csv" &
  sampler=$!
  mark idle; sleep 2
}
clock_sampler_stop() {
  mark after; sleep 1
  kill "$sampler"
  step clocks_summary 30 python3 benchmarks/gpu_clocks.py "$OUT"
}
[ $# -gt 0 ] || set -- tests formats bench builder
for what in "$@"; do
  case $what in
    # The whole GPU suite took 328 s on an H200 with 8 workers (forty-first run); with ~90 cases
    # added it ran to 83% in 430 s on an H100 (forty-fourth run). Compiling kernels keeps the CPUs
    # busy, so more workers than 8 of the machine's 16 cores.
    tests) step gpu_tests "${GPU_TESTS_LIMIT:-560}" python3 -m pytest -q -m gpu -n "${GPU_TESTS_WORKERS:-14}" \
             -p no:cacheprovider \
             --deselect tests/test_cli.py::test_default_build_on_the_gpu ${GPU_TESTS_ARGS:-tests} ;;
    # The format device functions run compiled (not interpreted) where CUDA is present.
    formats) step gpu_formats "${FORMATS_LIMIT:-60}" python3 -m pytest -q -p no:cacheprovider \
               tests/test_formats_triton.py tests/test_formats_stochastic.py ;;
    builder) step gpu_builder "${BUILDER_LIMIT:-120}" python3 -m pytest -q -p no:cacheprovider \
               tests/test_cli.py::test_default_build_on_the_gpu ;;
    bench)
      step bench_mamba2 "${BENCH_LIMIT:-150}" python3 benchmarks/bench_mamba2_decode.py ${MAMBA2_BENCH_ARGS:-} --json "$OUT/mamba2.json"
      step bench_gdn "${BENCH_LIMIT:-150}" python3 benchmarks/bench_gdn_decode.py ${GDN_BENCH_ARGS:-} --json "$OUT/gdn.json"
      step bench_kda "${BENCH_LIMIT:-150}" python3 benchmarks/bench_kda_decode.py ${KDA_BENCH_ARGS:-} --json "$OUT/kda.json" ;;
    bench-mamba2) step bench_mamba2 "${BENCH_LIMIT:-150}" python3 benchmarks/bench_mamba2_decode.py ${MAMBA2_BENCH_ARGS:-} \
                    --json "$OUT/mamba2.json" ;;
    paper)
      if [ -z "${PAPER_ROOT:-}" ]; then
        echo "=== paper: set PAPER_ROOT to a checkout of the paper's repository"; status=1; continue
      fi
      step bench_mamba2_paper "${BENCH_LIMIT:-150}" python3 benchmarks/bench_mamba2_paper.py --paper-root "$PAPER_ROOT" \
        --batches 1 128 256 512 --json "$OUT/mamba2_paper.json"
      step bench_gdn_paper "${BENCH_LIMIT:-150}" python3 benchmarks/bench_gdn_paper.py --paper-root "$PAPER_ROOT" \
        --accuracy --batches 1 128 256 512 --json "$OUT/gdn_paper.json" ;;
    # The Mamba-2 step options and probes prepared without a GPU (NOTES_mamba2.md, forty-second
    # and forty-third runs); the fortieth run's options were timed in the forty-first (RESULTS.md).
    options-tests) step gpu_tests_options "${GPU_TESTS_LIMIT:-330}" python3 -m pytest -q -m gpu -n 8 \
                     -p no:cacheprovider tests/test_mamba2_flush_cuda.py tests/test_mamba2_kernels.py tests/test_mamba2_ring_dt.py \
                     -k "dt_sector or dt-sector or four_windows or entry_major or ring_dt_strides or taper" ;;
    # The non-flush step's options: the token's dt entry stored as its whole sector, or into a
    # ring_dt stored entries outermost (the state's layout, not a launch field), each twice beside
    # the default. On an H200 (forty-fifth run) neither gained at 256 or 512 (the entries layout
    # lost at 512); the flush launch issued after the stream launch, timed in the same call, lost
    # and was removed. ~30 s.
    options-nonflush) step variants_nonflush "${BENCH_LIMIT:-400}" python3 benchmarks/bench_mamba2_decode.py \
                        --variants --variant-rounds 20 --budget-s 370 --variant-batches 256 512 32 \
                        --derive "ring_dt_layout=entries" "ring_dt_sector=true" "" \
                        "ring_dt_layout=entries" "ring_dt_sector=true" \
                        --json "$OUT/variants_nonflush.json" ;;
    parts)
      step parts_allflush "${BENCH_LIMIT:-90}" python3 benchmarks/probe_flush_step_parts.py --batch 256 --rounds 20 \
        --timeline 0
      # batch 128: the flush step's ~25-30 us that do not scale with the batch (1.12x against 1.1x)
      step parts_allflush_128 "${BENCH_LIMIT:-90}" python3 benchmarks/probe_flush_step_parts.py --batch 128 \
        --rounds 20 --timeline 0 --stages 2 3 4
      for c in 0 7; do
        step "parts_nonflush_c$c" "${BENCH_LIMIT:-90}" python3 benchmarks/probe_flush_step_parts.py --batch 256 \
          --committed "$c" --rounds 20 --timeline 2
      done ;;
    # The flush step at 128-160 (1.11-1.12x on an H200): each batch's default (the counter's takes
    # 2 items, its last ones one at a time, under the 3-stage cap: chunks of 2 the default there
    # since the forty-sixth run: 1.5-3.2 us shorter on an H100, tied within 1 us on an H200 in the
    # forty-eighth run) three times beside takes of 4 (the forty-fifth run's default) and the
    # stream launch's 8-row tiles. --derive replaces fields of the batch-256 default, which caps no
    # stages (the warp-specialised flush reads no other field that differs at 128-160);
    # "ring_dt_layout=heads" alone is each batch's own default. ~40 s.
    options-flush) step variants_flush "${BENCH_LIMIT:-200}" python3 benchmarks/bench_mamba2_decode.py \
                     --variants --variant-rounds 20 --budget-s 170 --variant-batches 128 160 \
                     --derive "ring_dt_layout=heads" "flush_ws_max_stages=3, flush_ws_taper=2" \
                     "block_p=8, flush_ws_max_stages=3, flush_ws_taper=2, flush_ws_chunk=2" \
                     "ring_dt_layout=heads" "flush_ws_max_stages=3, flush_ws_taper=2" \
                     "block_p=8, flush_ws_max_stages=3, flush_ws_taper=2, flush_ws_chunk=2" \
                     "ring_dt_layout=heads" "flush_ws_max_stages=3, flush_ws_taper=2" \
                     --json "$OUT/variants_flush.json" ;;
    # The stream launch's 8-row checkpoint tiles (twice the programs, 16-byte y stores) three times
    # beside the default's 16 rows. On two H100s (forty-sixth run, three pairs each) the non-flush
    # step took 0.8-0.9 / 1.9-2.0 / 2.5-2.7 us less at Nemotron-H 256 / Nemotron-3-Nano 256 /
    # Nemotron-H 512, the flush step the same; 48 registers gained nothing and 40 lost 51 us. A
    # third H100 (forty-seventh run) read 1.0-1.5 / 1.8-2.6 us less at Nemotron-H 256 / 512. On an
    # H200 (forty-eighth run) they lost: non-flush +1.1-1.8 us at 256 and +5.3-6.1 at 512, the
    # staggered step +5-36 us; the default keeps 16 rows. ~30 s.
    options-stream-tiles) step variants_stream_tiles "${BENCH_LIMIT:-200}" python3 benchmarks/bench_mamba2_decode.py \
                            --variants --variant-rounds 20 --budget-s 180 --variant-batches 256 512 \
                            --derive "block_p=8" "" "block_p=8" "" "block_p=8" "" \
                            --json "$OUT/variants_stream_tiles.json" ;;
    # The warp-specialised flush's producer asking the L2 for its next items (flush_ws_l2_ahead 1 /
    # 2, not yet timed): its GPU cases, then each beside the default twice at 256 / 512, and at 128
    # under that batch's stage cap, taper and takes of 2 ("ring_dt_layout=heads" alone is each
    # batch's own default; other --derive rows replace fields of the batch-256 default). ~3 min.
    options-ws-l2)
      step gpu_tests_ws_l2 "${GPU_TESTS_LIMIT:-240}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
        tests/test_mamba2_flush_cuda.py -k l2_ahead
      capped="flush_ws_max_stages=3, flush_ws_taper=2, flush_ws_chunk=2"
      # (at 128 also two stages with two items asked ahead: what a third stage held, without its
      # shared memory)
      step variants_ws_l2 "${BENCH_LIMIT:-360}" python3 benchmarks/bench_mamba2_decode.py \
        --variants --variant-rounds 20 --budget-s 340 --variant-batches 256 512 128 \
        --derive "ring_dt_layout=heads" "flush_ws_l2_ahead=1" "flush_ws_l2_ahead=2" \
        "flush_ws_l2_ahead=1, $capped" "flush_ws_l2_ahead=2, $capped" \
        "flush_ws_l2_ahead=2, flush_ws_max_stages=2, flush_ws_taper=2, flush_ws_chunk=2" \
        "ring_dt_layout=heads" "flush_ws_l2_ahead=1" "flush_ws_l2_ahead=2" \
        "flush_ws_l2_ahead=1, $capped" "flush_ws_l2_ahead=2, $capped" \
        --json "$OUT/variants_ws_l2.json" ;;
    # The flush default against the forty-eighth run's, in turn, 30 rounds: the default four times,
    # the old uncapped form three times and the old capped form (batch 128's old default) twice.
    # Written for the fiftieth run's default (the L2 prefetch of the next item in in-phase steps;
    # from batch 192 takes of 2, the taper, at most 4 stages): 41 s on an H100 (fifty-first run).
    # On an H200 the prefetch lost (fifty-third run); the default now leaves it out, and from
    # batch 512 it is the old form again.
    ws-l2-default)
      old="flush_ws_l2_ahead=0, flush_ws_max_stages=0, flush_ws_taper=0, flush_ws_chunk=4"
      old128="flush_ws_l2_ahead=0, flush_ws_max_stages=3, flush_ws_taper=2, flush_ws_chunk=2"
      step variants_ws_l2_default "${BENCH_LIMIT:-240}" python3 benchmarks/bench_mamba2_decode.py \
        --variants --variant-rounds 30 --budget-s 220 --variant-batches 256 512 192 128 \
        --derive "ring_dt_layout=heads" "$old" "$old128" "ring_dt_layout=heads" "$old" "$old128" \
        "ring_dt_layout=heads" "$old" --json "$OUT/variants_ws_l2_default.json" ;;
    # The flush with and without the L2 prefetch of its next item, in turn, 30 rounds: on an H100
    # the prefetch shortened the flush (fiftieth and fifty-fourth runs), on an H200 it lengthened
    # it at Nemotron-H dims (fifty-third and fifty-fourth); launch_config's default differs by GPU
    # (L2_AHEAD_GPUS). Rows: the GPU's own default ("ring_dt_layout=heads"), then both forms
    # explicitly (the batch-256 default's takes of 2 and taper 2, also at 512: the fiftieth run's
    # form there), three times. The fifty-fourth run's tables took "default" and
    # "flush_ws_l2_ahead=1" alone, when every GPU's default left the prefetch out.
    ws-l2-prefetch)
      step variants_ws_l2_prefetch "${BENCH_LIMIT:-240}" python3 benchmarks/bench_mamba2_decode.py \
        --variants --variant-rounds 30 --budget-s 220 --variant-batches 256 512 192 \
        --derive "ring_dt_layout=heads" "flush_ws_l2_ahead=0" "flush_ws_l2_ahead=1" \
        "ring_dt_layout=heads" "flush_ws_l2_ahead=0" "flush_ws_l2_ahead=1" \
        "ring_dt_layout=heads" "flush_ws_l2_ahead=0" "flush_ws_l2_ahead=1" --json "$OUT/variants_ws_l2_prefetch.json" ;;
    # The same at Nemotron-3-Nano dims (head_dim 80), flush steps only (the prefetch moved no
    # non-flush step by more than 0.5 us): on the H200 it shortened the flush there where it
    # lengthened Nemotron-H's (fifty-third and fifty-fourth runs). Each batch's form without it
    # (from 512 takes of 4, untapered) against the form with it (takes of 2, taper 2), whatever
    # the GPU's default is; 2 states x 2 graphs each.
    ws-l2-prefetch-nano)
      for b in 128 256 512; do
        without="flush_ws_l2_ahead=0$([ $b = 512 ] && echo ", flush_ws_taper=0, flush_ws_chunk=4")"
        step "flush_captures_nano_$b" "${BENCH_LIMIT:-120}" python3 benchmarks/probe_flush_captures.py \
          --dims 96 80 128 8 --batch $b --derive "$without" "flush_ws_l2_ahead=1, flush_ws_taper=2, flush_ws_chunk=2" \
          --allocations 2 --captures 2 --rounds 20
      done ;;
    # What a grid launched from the device (CUDA dynamic parallelism) costs inside a graph: a step
    # with nothing to fold (a launcher finding nothing, against a gated grid's exits) and an
    # all-flush one (device-launched against host-launched grids); needs nvcc. ~1 min.
    device-launch)
      step probe_device_launch "${BENCH_LIMIT:-240}" python3 benchmarks/probe_device_launch.py --rounds 30 ;;
    # The L2 flush before each timed replay: what the form that zeroes a buffer (the default, every
    # table so far) leaves to the replay, against one that reads it; then the Mamba-2 target
    # batches under each, in one process each. ~3 min.
    l2-flush)
      step probe_l2_flush "${BENCH_LIMIT:-120}" python3 benchmarks/probe_l2_flush.py --json "$OUT/probe_l2_flush.json"
      for mode in write read; do
        step "bench_mamba2_flush_$mode" "${BENCH_LIMIT:-150}" python3 benchmarks/bench_mamba2_decode.py \
          --l2-flush "$mode" --dims nemotron_h --batches 256 128 512 --repeats 2 --json "$OUT/mamba2_flush_$mode.json"
      done ;;
    # The warp-specialised flush with 16 (the default), 8 and 4 consumer warps (4, 8, 16 rows a
    # warp at Nemotron-H dims): fewer warps widen each 16-bit ring B entry for more FMAs (the block's
    # sm_90 SASS: ~20% / ~30% fewer instructions an item). Its GPU cases, then the three in turn,
    # three times each, at 256 and 512 (each row replaces a field of the batch-256 default, so at
    # 512 the rows compare among themselves). ~4 min.
    ws-consumers)
      step gpu_tests_ws_consumers "${GPU_TESTS_LIMIT:-240}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
        tests/test_mamba2_flush_cuda.py -k cw
      step variants_ws_consumers "${BENCH_LIMIT:-300}" python3 benchmarks/bench_mamba2_decode.py \
        --variants --variant-rounds 20 --budget-s 280 --variant-batches 256 512 \
        --derive "flush_ws_consumers=16" "flush_ws_consumers=8" "flush_ws_consumers=4" \
        "flush_ws_consumers=16" "flush_ws_consumers=8" "flush_ws_consumers=4" \
        "flush_ws_consumers=16" "flush_ws_consumers=8" "flush_ws_consumers=4" --json "$OUT/variants_ws_consumers.json" ;;
    # The fold alone in three forms: a grid of 64-row blocks, the same blocks as a wave fed by a
    # counter, and the warp-specialised wave (the fifty-fifth and fifty-eighth runs, H100s). --only
    # matches name prefixes: the grid's name also selects its waves (striding, counter-fed). ~1 min.
    fold-counter)
      step fold_counter "${BENCH_LIMIT:-150}" bash -c 'cd benchmarks && python3 bench_fold_ceiling.py --rounds 40 \
        --standard --only "cuda grid r8 w8 b2 xs ys" "cuda ws c16 s5 b1 h1 pstore"' ;;
    # The GPU's clocks, power and clock-event reasons sampled every 50 ms (nvidia-smi) while the
    # Mamba-2 all-flush step replays alone (Nemotron-H 512, 4000 rounds: ~5 s of replays after the
    # probe's setup, which the part's samples also hold) and while the plain table
    # runs at 512 and 256, three repeats; benchmarks/gpu_clocks.py prints them part by part. On
    # one H200 the all-flush step grew from repeat to repeat (fifty-ninth run). ~1.5 min.
    clocks)
      clock_sampler_start
      mark all-flush-512
      step clocks_flush_512 "${BENCH_LIMIT:-120}" python3 benchmarks/probe_flush_captures.py --batch 512 \
        --allocations 1 --captures 1 --rounds 4000
      mark plain-table
      step clocks_bench "${BENCH_LIMIT:-200}" python3 benchmarks/bench_mamba2_decode.py --dims nemotron_h \
        --batches 512 256 --repeats 3 --json "$OUT/clocks_bench.json"
      clock_sampler_stop ;;
    # The all-flush step alone with 16 (the default) and 8 consumer warps in turn, a process each,
    # twice, at Nemotron-H 256 and 512 (each batch's default with the field replaced), the clocks
    # sampled as in `clocks`: with 8 warps each 16-bit ring B entry a warp widens serves twice the
    # FMAs (~20% fewer instructions an item), which matters where the board's power cap lowers the
    # SM clock (the sixtieth run: 700 W reached; the SM clock's median 1725 MHz over the all-flush
    # step's capped samples, against 1980). ~2 min.
    # CLOCKS_BATCHES, CLOCKS_PASSES and CLOCKS_ROUNDS (rounds a process, every batch) change the
    # plan; CLOCKS_WARMUP=N first replays the 16-warp step N rounds at the first batch, untimed
    # as a comparison, so that the board is warm when the pairs start.
    clocks-consumers)
      clock_sampler_start
      batches=${CLOCKS_BATCHES:-256 512}
      if [ -n "${CLOCKS_WARMUP:-}" ]; then
        mark "warmup"
        step clocks_flush_warmup "${BENCH_LIMIT:-60}" python3 benchmarks/probe_flush_captures.py \
          --batch "${batches%% *}" --allocations 1 --captures 1 --rounds "$CLOCKS_WARMUP"
      fi
      for b in $batches; do
        for r in $(seq 1 "${CLOCKS_PASSES:-2}"); do
          for cw in 16 8; do
            mark "flush-$b-cw$cw"
            step "clocks_flush_${b}_cw${cw}_$r" "${BENCH_LIMIT:-60}" python3 benchmarks/probe_flush_captures.py \
              --batch $b --derive "flush_ws_consumers=$cw" --allocations 1 --captures 1 \
              --rounds "${CLOCKS_ROUNDS:-$((b == 256 ? 3000 : 1500))}"
          done
        done
      done
      clock_sampler_stop ;;
    # Power, not time: the fold alone (bench_fold_ceiling.py at Nemotron-H 512, 3000 rounds a
    # process) in four forms and the standard step, twice, the clocks sampled as in `clocks`. On a
    # board below its cap the fold's instructions cost watts before they cost time (the sixty-second
    # run: 8 consumer warps, 15-28 W less and no time); where the cap lowers the SM clock (an H200)
    # the watts become time. Forms (each a name prefix, so a part also times the forms whose names
    # extend it): no fold (load, scale, store; its state decays towards zero over the replays, so
    # its power is no floor), the FMA grid, the same grid with the product on the tensor cores
    # (bf16 mma.sync, x in three parts: exact to fp32), the warp-specialised FMA wave (the step's
    # flush kernel's form). ~4 min.
    clocks-fold)
      clock_sampler_start
      for r in 1 2; do
        mark "standard-512"
        step "clocks_fold_standard_$r" "${BENCH_LIMIT:-60}" bash -c 'cd benchmarks && python3 bench_fold_ceiling.py \
          --batch 512 --rounds 3000 --standard --only none-of-the-forms'
        for form in "plain bp32 w4 none" "cuda grid r8 w8 b2 xs ys" "cuda mma w4 b4 x3 yf" "cuda ws c16 s5 b1 h1 pstore"; do
          mark "fold-${form// /_}"
          step "clocks_fold_${form// /_}_$r" "${BENCH_LIMIT:-60}" bash -c "cd benchmarks && python3 bench_fold_ceiling.py \
            --batch 512 --rounds 3000 --only '$form'"
        done
      done
      clock_sampler_stop ;;
    *) echo "unknown step $what (expected tests, formats, builder, bench, bench-mamba2, paper, options-tests," \
            "options-nonflush, parts, options-flush, options-stream-tiles, options-ws-l2, ws-l2-default, ws-l2-prefetch," \
            "ws-l2-prefetch-nano, device-launch, l2-flush, ws-consumers, fold-counter, clocks, clocks-consumers," \
            "clocks-fold)"; exit 2 ;;
  esac
done
exit $status
