"""Process-wide state, in one place: the services that the front end calls in the stages above it,
and the caches of every stage.

The layers import only downward (front end, ops, compile, runtime, training stack), yet a ``Var``
must be able to ask for its value, which the executor computes. So each stage that serves a lower
one installs its service here when it is imported (``services.realize = ...``), and the lower one
calls through ``services``; ``import jtmini`` imports every stage, so all are in place before the
first Var exists.

The random engine lives here too (``random_engine``): Jittor's one process-wide generator, reset
by ``jt.set_seed`` and advanced by each ``random`` op as it runs (``ops/random_op.py``).

Caches register here with what bounds them, so that ``jt.clear_caches()`` empties every one of
them (compiled plans, generated code, loaded libraries, thread trials, shared constants):

    >>> import jtmini as jt
    >>> "code" in jt.state.caches and "plans" in jt.state.caches
    True
    >>> jt.clear_caches()
"""


class _Services:
    """What lower layers call in higher ones; each is set by the module that provides it."""

    def __init__(self):
        self.realize = _missing("realize", "jtmini.executor")      # compute a list of Vars
        self.array = _missing("array", "jtmini.creation")          # a leaf Var from data
        self.as_var = _missing("as_var", "jtmini.creation")        # a Var from a Var, array or number
        self.to_host = _missing("to_host", "jtmini.runtime.cuda")  # a device buffer as numpy
        self.enqueue_collective = _missing("enqueue_collective", "jtmini.runtime.mpi")   # queue a new collective
        # the frames that built a Var, while flags.profile_memory_enable is on
        self.record_creation = _missing("record_creation", "jtmini.memory_profile")
        # a collective node rebound before it was issued: its queue must keep the old node
        self.requeue_collective = lambda new, old: None
        # start compiling a host hand-written kernel that a library op just built will need
        self.prepare_kernel = _missing("prepare_kernel", "jtmini.executor")


def _missing(name, provider):
    def call(*args, **kwargs):
        raise RuntimeError(f"jtmini.state.services.{name} is not installed: import {provider} "
                           "(import jtmini does) before using it")
    return call


services = _Services()


class RandomEngine:
    """Jittor's process-wide ``std::default_random_engine`` (libstdc++'s ``minstd_rand0``:
    x <- 16807 x mod 2^31-1): the seed it was last reset with, and its state ``x``, which each
    ``random`` op advances by the numbers it draws, under ``lock`` (one draw at a time).

    >>> e = RandomEngine(); e.reset(3); (e.seed, e.x)
    (3, 3)
    """
    MODULUS = 2**31 - 1

    def __init__(self):
        import threading                 # here: this module otherwise imports nothing
        self.lock = threading.Lock()
        self.seed, self.x = 0, 1

    def reset(self, seed):
        """``std::default_random_engine(seed)``: the seed as C++'s 64-bit ``uint_fast32_t``,
        modulo 2^31-1, where 0 becomes 1 (0 is a fixed point of the recurrence)."""
        self.seed = seed
        self.x = int(seed) % 2**64 % self.MODULUS or 1


random_engine = RandomEngine()     # seeded from OS entropy by jtmini.creation at import

# id(Var) -> the Var computing its next value, while an optimizer step computes those: the
# runtime may write such a value over the buffer of the Var it replaces (runtime/cpu_inplace.py)
replacing = {}
caches = {}          # name -> (clear function, what bounds it)


class HashedKey:
    """A cache key that hashes once: a tuple does not keep its hash, and hashing a step's graph
    (~1500 rows) twice, for the lookup and for moving the entry to the end, cost ~0.5 ms. The
    plans (``replay``) and the backward recipes (``grad_recipe``) are keyed by these."""
    __slots__ = ("key", "hash", "born")
    _made = 0                       # keys made so far: ``born`` orders them

    def __init__(self, key):
        self.key, self.hash, self.born = key, hash(key), HashedKey._made
        HashedKey._made += 1

    def __hash__(self):
        return self.hash

    def __eq__(self, other):
        if not isinstance(other, HashedKey) or self.hash != other.hash:
            return False
        if self.key is other.key:
            return True
        if self.key != other.key:
            return False
        # equal: share one tuple, so the next compare of these two (the lookup's move_to_end)
        # meets the same row objects and skips the element-by-element walk (~20 us a GAN graph).
        # The older one's: a lookup's new rows then die at once, where keeping them in the stored
        # key left a step's ~10k young tuples for the cyclic collector to scan (~1 ms a seq2seq step)
        if self.born < other.born:
            other.key = self.key
        else:
            self.key = other.key
        return True


def register_cache(name, clear, bound):
    """Record a cache: ``clear()`` empties it, ``bound`` says in words what limits its size."""
    caches[name] = (clear, bound)


def clear_caches():
    """Empty every registered cache: later steps compile (from the disk cache), plan and load
    again. Use it to release memory between phases, or to measure a cold step in one process.

    >>> import jtmini as jt
    >>> jt.clear_caches()
    """
    for clear, _ in caches.values():
        clear()
