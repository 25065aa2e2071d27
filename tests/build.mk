# Whole-system tests: the demo path at a smaller size (last: it uses every part).
INTEGRATION_TESTS += tests/integration/e2e-demo.sh
