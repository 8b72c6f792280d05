"""Synthetic token data through a real DataLoader and DistributedSampler.

Sample i is a function of (seed, i) alone, so a run's global batch at step t is the same
whatever the world size or parallelism: the sampler permutes the same index range with
the same seed, and data-parallel rank r takes every dp-th index of it.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler

from reference_trainer.config import DataConfig, ModelConfig
from reference_trainer.faults import DataFaults

# The sampler hands the dataset (index, step, first_of_batch) keys so that data-path
# faults know which step a sample is loaded for, even inside a loader worker.
Key = tuple[int, int, bool]


def sample_tokens(seed: int, index: int, seq_len: int, vocab: int) -> torch.Tensor:
    """seq_len + 1 tokens of an arithmetic progression mod vocab: learnable (the next token
    follows from the previous two) yet different for every sample."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + index)
    start = torch.randint(0, vocab, (1,), generator=gen)
    stride = torch.randint(1, 5, (1,), generator=gen)
    return (start + stride * torch.arange(seq_len + 1)) % vocab


class SyntheticTokens(Dataset):
    """Next-token pairs (inputs, targets), each ``seq_len`` long."""

    def __init__(self, model: ModelConfig, data: DataConfig, faults: DataFaults) -> None:
        self.seed, self.samples, self.batch = data.seed, data.samples, data.batch
        self.seq_len, self.vocab = model.seq_len, model.vocab
        self.faults = faults

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, key: Key | int) -> tuple[torch.Tensor, torch.Tensor]:
        index, step, first = key if isinstance(key, tuple) else (key, -1, False)
        self.faults.before_item(step, first, self.batch)
        tokens = sample_tokens(self.seed, index, self.seq_len, self.vocab)
        return tokens[:-1], tokens[1:]


class StepTaggedSampler(Sampler[Key]):
    """A DistributedSampler whose indices carry the step they are loaded for."""

    def __init__(self, inner: DistributedSampler, batch: int) -> None:
        self.inner, self.batch = inner, batch
        self.steps_per_epoch = len(inner) // batch
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.inner.set_epoch(epoch)

    def __len__(self) -> int:
        return self.steps_per_epoch * self.batch

    def __iter__(self) -> Iterator[Key]:
        first_step = self.epoch * self.steps_per_epoch
        for pos, index in zip(range(len(self)), self.inner):
            yield index, first_step + pos // self.batch, pos % self.batch == 0


def build_loader(model: ModelConfig, data: DataConfig, faults: DataFaults, *,
                 dp_rank: int, dp_size: int, pin_memory: bool) -> DataLoader:
    """This rank's loader; ``dp_rank``/``dp_size`` shard the data (pipeline stages of one
    replica load the same batch: the first stage needs the inputs, the last the targets)."""
    if data.samples < data.batch * dp_size:
        raise ValueError(f"--samples {data.samples} is smaller than one global batch "
                         f"({data.batch} x {dp_size} replicas); raise --samples")
    dataset = SyntheticTokens(model, data, faults)
    inner = DistributedSampler(dataset, num_replicas=dp_size, rank=dp_rank, shuffle=True,
                               seed=data.seed, drop_last=True)
    return DataLoader(dataset, batch_size=data.batch, sampler=StepTaggedSampler(inner, data.batch),
                      num_workers=data.loader_workers, drop_last=True, pin_memory=pin_memory)


def batches(loader: DataLoader) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches forever, epoch after epoch, reshuffled per epoch as DistributedSampler does."""
    sampler: StepTaggedSampler = loader.sampler
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1
