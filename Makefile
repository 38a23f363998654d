# The two commands of the README:
#   make demo   - installs what is missing, starts the local stack and runs the demo
#   make test   - installs what is missing and runs the test suite (CI runs exactly this)
.PHONY: demo test bootstrap bench stack-down clean

bootstrap:
	./scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/cdc demo

test: bootstrap
	./scripts/test.sh

# every bench takes BENCH_ARGS, e.g. make bench BENCH_ARGS="--record --state-dir /tmp/bench-stack"
bench: bootstrap
	.venv/bin/python -m bench.ingest_throughput $(BENCH_ARGS)
	.venv/bin/python bench/merger_bench.py $(BENCH_ARGS)
	.venv/bin/python bench/verify_bench.py $(BENCH_ARGS)
	.venv/bin/python bench/memory_bench.py $(BENCH_ARGS)
	.venv/bin/python bench/start_bench.py $(BENCH_ARGS)

stack-down:
	.venv/bin/cdc stack down

clean: stack-down
	rm -rf .cdc
