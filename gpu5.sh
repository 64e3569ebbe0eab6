set -u
mkdir -p /tmp/r
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
save(){ tar czf $OUT/r.tgz -C /tmp r; }
timeout 150 python3 benchmarks/bench_kda_decode.py --batches 128 256 --sweep --default-with "pdl=true" "ring_max_registers=80" "ring_max_registers=64" --json /tmp/r/kda_pdl_ringcap.json > /tmp/r/kda_pdl_ringcap.txt 2>&1; save
timeout 120 python3 benchmarks/profile_delta_step.py --kind kda --batch 128 --variants default --derive "default: pdl=true" --timeline > /tmp/r/kda_timeline_128.txt 2>&1; save
