# Real MPI across the test cluster's nodes, in and out of containers (it
# builds the cached MPI image with scripts/make-mpi-image on first use).
INTEGRATION_TESTS += tests/integration/mpi-cluster.sh
# Whole-system tests: the demo path at a smaller size (last: it uses every part).
INTEGRATION_TESTS += tests/integration/e2e-demo.sh
