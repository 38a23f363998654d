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

bench: bootstrap
	.venv/bin/python -m bench.ingest_throughput
	.venv/bin/python bench/merger_bench.py
	.venv/bin/python bench/verify_bench.py
	.venv/bin/python bench/memory_bench.py
	.venv/bin/python bench/start_bench.py

stack-down:
	.venv/bin/cdc stack down

clean: stack-down
	rm -rf .cdc
