# plugin/: spank_skiff.so, the SPANK plugin (links the PIC libskiff).

# The local Slurm test cluster (tests/cluster/); SKIFF_CLUSTER_INDEX=0..9.
cluster-up:
	tests/cluster/up $(NODES)

cluster-down:
	tests/cluster/down

.PHONY: cluster-up cluster-down
