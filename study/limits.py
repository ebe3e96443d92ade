"""Explicit limits on what a study file, a data source or a command may ask for (what each
bounds: docs/study-files.md "Limits"; a comment here says why a value is what it is).  An input
beyond one is refused before anything runs, with one line naming the field, instead of a hang,
an out-of-memory kill or a file-system error an hour later; plain constants, so a deployment
that needs more changes one number here.
"""

from __future__ import annotations

# ---------------------------------------------------------------- study files
MAX_STUDY_FILE_BYTES = 1_000_000  # the shipped ones are < 2 kB
MAX_YAML_NODES = 20_000  # an alias bomb is refused from the event stream, before any node is built
MAX_YAML_DEPTH = 64  # 10,000 deep exhausts Python's recursion; ours nest 4 deep
MAX_INT_DIGITS = 100  # Python refuses to convert more than 4,300
MAX_TRIALS = 100_000
MAX_GRID_CELLS = 10_000
MAX_SEEDS = 1_000
MAX_LIST_ENTRIES = 1_000
MAX_CHECKED_COMBINATIONS = 5_000  # beyond, one axis at a time
MAX_OVERRIDES = 100
MAX_OVERRIDE_CHARS = 10_000
MAX_SEED = 2**32 - 1  # a seed is given to torch, numpy and Optuna: numpy's limit
MAX_EPOCHS = 100_000
MAX_NUM_SAMPLES = 100_000
MAX_BATCH_SIZE = 1_000_000
MAX_FAILURES = 1_000
MAX_NAME_LENGTH = 100  # a study name is a folder name on local disks and in object storage
#: a local path the file system takes: NAME_MAX bytes a component, PATH_MAX bytes in all (Linux, macOS)
MAX_PATH_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 4_095
MAX_DESCRIPTION_CHARS = 10_000
#: model sizes (the paper: N_h ≤ 25, D = D_p = 400, 6 layers, 512 intermediate): a typo
#: of a few zeros is refused instead of allocating terabytes
MAX_MODEL_FIELD = {
    "num_heads": 1_024,
    "pos_dim": 16_384,
    "hidden": 16_384,
    "layers": 256,
    "intermediate": 65_536,
    "num_classes": 100_000,
    "image_size": 1_024,
    "in_channels": 64,
    "downsample": 64,
}
MAX_TRAIN_FIELD = {
    "head_images": 100_000,
    "eval_batch_size": 1_000_000,
    "map_radius": 1_024,
    "warmup_steps": 10**12,
}  # no run is longer: MAX_EPOCHS of at most MAX_SOURCE_FILES steps
MAX_CPUS_PER_TRIAL = 1_024
MAX_GPUS_PER_TRIAL = 1_024
MAX_CLUSTER_CPUS = 1_000_000
MAX_CLUSTER_GPUS = 100_000
MAX_MODEL_PARAMS = 1_000_000_000  # 4 GB of float32 weights; the paper's are ≤ 12 M

# ---------------------------------------------------------------- other commands
MAX_THEOREM_ELEMENTS = 2**28  # 2 GiB in float64
MAX_THEOREM_MACS = 2**36  # about a minute of one CPU core
MAX_BENCH_BATCH = 4_096
MAX_BENCH_STEPS = 100_000
MAX_BENCH_REPEATS = 1_000
MAX_EVAL_BATCH = 100_000
MAX_SUBSET = 10_000_000  # CIFAR-10 has 50,000
MAX_PORT = 65_535
MAX_QUERY_ROWS = 2_000_000  # `analysis query` holds its rows as Python objects: a few GB at most
#: throughputs `study plan` takes: far slower than any device that trains to far beyond any
#: that exists; outside, a typo (`5e-324`), never a device
MIN_TFLOPS, MAX_TFLOPS = 1e-6, 1e6
MIN_IMAGES_PER_S, MAX_IMAGES_PER_S = 1e-6, 1e9
#: RandAugment's operation set (torchvision) has 14 operations; its magnitude has 31 bins (0-30)
MAX_RANDAUGMENT_OPS = 14
MAX_RANDAUGMENT_MAGNITUDE = 30
MIN_SERVE_INTERVAL_S, MAX_SERVE_INTERVAL_S = 0.1, 86_400.0  # a day at most

# ---------------------------------------------------------------- study metadata
MAX_META_FILE_BYTES = 16 * 2**20  # ours are < 100 kB
MAX_META_DEPTH = 128  # study.json holds the study file: MAX_YAML_DEPTH and a few levels

# ---------------------------------------------------------------- data sources
MAX_SYNTHETIC_TRAIN = 200_000  # generation holds ~60 kB per image at its peak
MAX_SOURCE_BYTES = 8 * 2**30  # streamed, never held in memory whole
MAX_SOURCE_IMAGE_BYTES = 512 * 2**20  # reading any source stays well under 1 GiB
MAX_DECOMPRESSED_BYTES = 8 * 2**30
MAX_IMAGE_FILE_BYTES = 16 * 2**20  # a 32×32 image is a few kB in any format
MAX_IMAGE_PIXELS = 32 * 32  # larger ones are refused before decoding
MAX_SOURCE_FILES = 10_000_000
MIN_CLASSES = 2  # a one-class tree trains nothing
MAX_CLASSES = 100_000

#: name → value (the table in docs/study-files.md lists them)
ALL = {k: v for k, v in dict(globals()).items() if k.isupper() and not k.startswith("_")}
