"""Minimal DDP program that relies only on the per-task environment skiff sets."""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--backend", default="nccl" if torch.cuda.is_available() else "gloo")
args = p.parse_args()

dist.init_process_group(args.backend, init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local) if args.backend == "nccl" else torch.device("cpu")
model = DDP(torch.nn.Linear(16, 1).to(device), device_ids=[local] if args.backend == "nccl" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    x = torch.randn(32, 16, device=device)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        print(f"step {step} loss {loss.item():.4f} world {world}", flush=True)
dist.destroy_process_group()
