"""A character-level transformer language model on a short built-in text, GPT style: token and
position embeddings, pre-LayerNorm blocks of causal multi-head self-attention and a GELU MLP,
trained with AdamW, gradient clipping and a cosine learning-rate schedule; then it writes.

    python examples/char_transformer.py
    bash tools/mpirun.sh -np 2 python examples/char_transformer.py

The step is written out the long way (``backward``, ``clip_grad_norm``, ``step``) because the
clipping goes between the two; under mpirun the norm clipped is that of the gradients summed
over ranks, so every rank clips alike and training equals one process.
"""
import numpy as np

import jtmini as jt
from jtmini import nn
from jtmini.dataset import Dataset

from common import global_losses, log, take

# The opening of "Alice's Adventures in Wonderland" (Lewis Carroll, 1865; public domain).
TEXT = (
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having "
    "nothing to do: once or twice she had peeped into the book her sister was reading, but it had "
    "no pictures or conversations in it, 'and what is the use of a book,' thought Alice 'without "
    "pictures or conversations?' So she was considering in her own mind (as well as she could, "
    "for the hot day made her feel very sleepy and stupid), whether the pleasure of making a "
    "daisy-chain would be worth the trouble of getting up and picking the daisies, when suddenly "
    "a White Rabbit with pink eyes ran close by her. There was nothing so very remarkable in that; "
    "nor did Alice think it so very much out of the way to hear the Rabbit say to itself, 'Oh "
    "dear! Oh dear! I shall be late!' (when she thought it over afterwards, it occurred to her "
    "that she ought to have wondered at this, but at the time it all seemed quite natural); but "
    "when the Rabbit actually took a watch out of its waistcoat-pocket, and looked at it, and then "
    "hurried on, Alice started to her feet, for it flashed across her mind that she had never "
    "before seen a rabbit with either a waistcoat-pocket, or a watch to take out of it, and "
    "burning with curiosity, she ran across the field after it, and fortunately was just in time "
    "to see it pop down a large rabbit-hole under the hedge. In another moment down went Alice "
    "after it, never once considering how in the world she was to get out again. The rabbit-hole "
    "went straight on like a tunnel for some way, and then dipped suddenly down, so suddenly that "
    "Alice had not a moment to think about stopping herself before she found herself falling "
    "down a very deep well."
)
CHARS = sorted(set(TEXT))
CODES = np.array([CHARS.index(c) for c in TEXT], "int32")


class CharWindows(Dataset):
    """Every window of ``block_size`` characters of TEXT with the next character of each
    position as its target: sample i is (TEXT[i:i+T], TEXT[i+1:i+T+1]) as int32 codes."""

    def __init__(self, block_size, batch_size):
        super().__init__()
        self.block_size = block_size
        self.set_attrs(batch_size=batch_size, shuffle=True, total_len=len(CODES) - block_size)

    def __getitem__(self, i):
        return CODES[i:i + self.block_size], CODES[i + 1:i + 1 + self.block_size]


class Block(nn.Module):
    """x + attention(LN(x)), then x + MLP(LN(x)): the pre-norm transformer block."""

    def __init__(self, dim, heads):
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def execute(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    """Logits (N, T, vocab) of the next character at every position of (N, T) codes."""

    def __init__(self, vocab_size, block_size=32, dim=64, heads=4, layers=2):
        self.tok_emb = nn.Embedding(vocab_size, dim)
        self.pos_emb = nn.Embedding(block_size, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)

    def execute(self, idx):
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(jt.arange(t))
        mask = jt.ones(t, t).triu(1) > 0           # True above the diagonal: no peeking ahead
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def make_optimizer(model, steps, lr=3e-3):
    """AdamW and a cosine decay of its learning rate to 0 over ``steps`` steps."""
    optimizer = nn.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    return optimizer, jt.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)


def train(model, optimizer, scheduler, loader, steps):
    """``steps`` clipped AdamW steps; returns (shard loss, shard size) of each step."""
    model.train()
    losses, sizes = [], []
    for x, y in take(loader, steps):
        logits = model(x)
        loss = nn.cross_entropy_loss(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.backward(loss)
        optimizer.clip_grad_norm(1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        sizes.append(len(x))
        if len(losses) % 100 == 0:
            log(f"step {len(losses)}: loss {losses[-1]:.4f}, lr {optimizer.lr:.2e}")
    return losses, sizes


def generate(model, length, block_size, temperature=0.6, seed=0):
    """``length`` characters sampled after the first ``block_size`` of TEXT. The context is always
    the last ``block_size`` characters, so every step has the same shape (kernels compile once)."""
    rng = np.random.default_rng(seed)
    codes = list(CODES[:block_size])
    model.eval()
    with jt.no_grad():
        for _ in range(length):
            logits = model(jt.array(np.array([codes[-block_size:]], "int32")))[0, -1].numpy()
            p = np.exp((logits - logits.max()) / temperature)
            codes.append(int(rng.choice(len(CHARS), p=p / p.sum())))
    model.train()
    return "".join(CHARS[c] for c in codes)


def main(steps=400, batch_size=32, block_size=32, sample_chars=200, seed=0):
    """Train ``steps`` steps, then print ``sample_chars`` generated characters (rank 0).
    Returns {"losses": global-batch loss per step, "sample": the text written}."""
    jt.seed(seed)
    model = CharTransformer(len(CHARS), block_size)
    optimizer, scheduler = make_optimizer(model, steps)
    loader = CharWindows(block_size, batch_size)
    losses = global_losses(*train(model, optimizer, scheduler, loader, steps))
    log(f"char_transformer: {steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    sample = ""
    if sample_chars and jt.rank == 0:            # no collectives inside: rank 0 may run it alone
        sample = generate(model, sample_chars, block_size)
        log(repr(sample))
    return {"losses": losses, "sample": sample}


if __name__ == "__main__":
    main()
