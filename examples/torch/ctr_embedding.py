"""Click-through prediction with a sparse embedding table: kelpie's example of
an nn.EmbeddingBag(sparse=True) model. The table has 2^24 rows; kelpie keeps
it on the servers as a sparse tensor and each step pulls and pushes only the
rows its batch touches (a worker never holds the table).

The click data are generated here, seeded: FIELDS categorical fields per
impression, ids Zipf-skewed (a few are hot, as in real CTR logs) and hashed
into the 2^24 id space, clicks drawn from a hidden logistic model of the ids.
`python3 ctr_embedding.py` trains the same model in one process for
comparison. The script has no kelpie calls.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ID_SPACE = 1 << 24
FIELDS = 8
VOCAB = 100_000          # distinct values per field before hashing
DIM = 8
TRAIN, TEST = 200_000, 20_000


def generate(n, seed):
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(12345)  # the hidden model, the same for both sets
    w = truth.normal(0, 1.0, size=(FIELDS, VOCAB)).astype(np.float32)
    ranks = (rng.zipf(1.2, size=(n, FIELDS)) - 1) % VOCAB       # Zipf-skewed values
    logit = w[np.arange(FIELDS), ranks].sum(1) / np.sqrt(FIELDS) - 0.5
    clicks = rng.random(n) < 1 / (1 + np.exp(-2 * logit))
    field = np.arange(FIELDS, dtype=np.int64) * VOCAB
    ids = ((ranks + field) * 2654435761) % ID_SPACE                # hashed into 2^24
    return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(clicks.astype(np.float32))


class Clicks(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        self.ids, self.y = generate(n, seed)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.ids[i], self.y[i]


class CTR(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(ID_SPACE, DIM, mode="sum", sparse=True)
        nn.init.zeros_(self.emb.weight)  # as kelpie's servers start sparse rows
        self.mlp = nn.Sequential(nn.Linear(DIM, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, ids, offsets):
        return self.mlp(self.emb(ids, offsets)).squeeze(-1)


def model():
    return CTR()


def train_set():
    return Clicks(TRAIN, 1)


def test_set():
    return Clicks(TEST, 2)


def collate(samples):
    """ids and offsets for the EmbeddingBag, and the clicks."""
    ids = torch.stack([s[0] for s in samples])
    y = torch.stack([s[1] for s in samples])
    return (ids.reshape(-1), torch.arange(0, ids.numel(), FIELDS)), y


def loss(output, target):
    return F.binary_cross_entropy_with_logits(output, target)


def metric(output, target):
    return ((output > 0).float() == target).float().mean()


def local(epochs=2, global_batch=256, lr=0.5, seed=1):
    """The same training in one process (plain SGD on the mean gradient of
    each global batch, as kelpie's servers apply it)."""
    torch.manual_seed(seed)
    m, train, test = model(), train_set(), test_set()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        perm = torch.randperm(len(train), generator=g)
        for s in range(0, len(train) - global_batch + 1, global_batch):
            (ids, offs), y = collate([train[i] for i in perm[s:s + global_batch].tolist()])
            opt.zero_grad()
            loss(m(ids, offs), y).backward()
            opt.step()
        with torch.no_grad():
            (ids, offs), y = collate([test[i] for i in range(len(test))])
            out = m(ids, offs)
            print("epoch %d: test loss %.4f accuracy %.4f" % (epoch + 1, loss(out, y).item(), metric(out, y).item()), flush=True)


if __name__ == "__main__":
    local(epochs=int(sys.argv[1]) if len(sys.argv) > 1 else 2)
