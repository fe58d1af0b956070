# One entry point for every developer task. Each target installs what it needs itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE := $(CURDIR)/.cache
export AIRFLOW_CDC_CACHE := $(CACHE)
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup test test-fast lint demo bench clean kinesis-up kinesis-down kafka-up s3-up

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[spark,dev]'
	touch $@

# Delta's jars, resolved once through Ivy; every session and spark-submit passes the files.
$(CACHE)/delta-jars.txt: $(BIN)/.installed airflow_cdc/jobs.py
	$(BIN)/python -m spark_jobs.session --resolve-jars

# The classes a job's JVM loads, parsed and verified once (a CDS archive), which the jobs'
# drivers map: each starts its work sooner (the example DAG's hourly batch 104-114 s ->
# 93-94 s on two cores). It is bound to pyspark's jars and to the JDK (a new one is a new
# java binary); a JDK that cannot write one leaves none (make goes on), and the stamp keeps
# make from trying again.
JAVA_BINARY := $(realpath $(shell command -v java))
$(CACHE)/spark-classes.stamp: $(BIN)/.installed spark_jobs/class_archive.py $(JAVA_BINARY) | $(CACHE)/delta-jars.txt
	-$(BIN)/python -m spark_jobs.class_archive
	touch $@

# Maven keeps its own repository in the cache: an artifact it knows only by its POM (an
# excluded dependency) would otherwise sit in ~/.m2, where Ivy's resolution of Delta's jars
# finds it first and then fails to download its jar.
MVN := mvn -q -Dmaven.repo.local=$(CACHE)/m2

$(CACHE)/kafka/.installed: scripts/kafka/pom.xml
	$(MVN) -f scripts/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CACHE)/kafka/libs
	touch $@

# S3Proxy (the tests' and the demo's S3 server) and hadoop-aws with the AWS SDK modules it
# calls (the jobs' s3a:// file system), each into its own directory.
$(CACHE)/s3/.installed: scripts/s3/pom.xml
	rm -rf $(CACHE)/s3/server $(CACHE)/s3/hadoop-aws
	$(MVN) -f scripts/s3/pom.xml -P server dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CACHE)/s3/server
	$(MVN) -f scripts/s3/pom.xml -P hadoop-aws dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CACHE)/s3/hadoop-aws
	touch $@

node_modules/.installed: package.json
	npm install --no-audit --no-fund --silent
	touch $@

setup: $(BIN)/.installed $(CACHE)/delta-jars.txt $(CACHE)/spark-classes.stamp $(CACHE)/kafka/.installed $(CACHE)/s3/.installed node_modules/.installed

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy airflow_cdc spark_jobs cdc_demo scripts

# The suite in TEST_WORKERS pytest-xdist workers (README, "make test"; how they share the
# modules: pyproject.toml's pytest addopts); 0 runs it in this process.
TEST_WORKERS ?= 2

test: setup
	$(BIN)/python -m pytest -q -ra --durations=15 -n $(TEST_WORKERS)

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow and not spark"

demo: setup
	$(BIN)/python scripts/demo.py $(DEMO_ARGS)

bench: setup
	$(BIN)/python scripts/bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(CACHE) node_modules .pytest_cache .mypy_cache .ruff_cache

KINESIS_PORT ?= 4567

kinesis-up: setup
	@if [ -f $(CACHE)/kinesis.pid ] && kill -0 $$(cat $(CACHE)/kinesis.pid) 2>/dev/null; then \
		echo "kinesis-local already running (pid $$(cat $(CACHE)/kinesis.pid))"; \
	else \
		nohup $(BIN)/python -m cdc_demo.kinesis --port $(KINESIS_PORT) \
			--log $(CACHE)/kinesis-server.log > $(CACHE)/kinesis.log 2>&1 & echo $$! > $(CACHE)/kinesis.pid; \
		sleep 3; cat $(CACHE)/kinesis.log; \
	fi

kinesis-down:
	@if [ -f $(CACHE)/kinesis.pid ]; then \
		kill $$(cat $(CACHE)/kinesis.pid) 2>/dev/null || true; rm -f $(CACHE)/kinesis.pid; \
		echo "kinesis-local stopped"; \
	else \
		echo "kinesis-local is not running"; \
	fi

kafka-up: setup
	$(BIN)/python -m cdc_demo.kafka

s3-up: setup
	$(BIN)/python -m cdc_demo.s3
