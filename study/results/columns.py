"""What every column of every table means: type, unit, convention, in one place for the writer
(:data:`study.results.tables.SCHEMA`: the columns each table has) and its readers (``analysis
schema``, which adds every encoding's own fields).  Conventions shared by all tables: docs/results.md,
"What the columns mean"."""

from __future__ import annotations

#: the key columns of the per-epoch tables (epochs: the first two), described once
KEYS = [
    ("trial_id", "text", "the trial (runs.trial_id)"),
    ("epoch", "int", "0-based epoch after which the row was taken (figures: 'after 1 epoch' is epoch 0)"),
    ("layer", "int", "0-based layer (figures: 'layer 1' is layer 0)"),
    ("head", "int", "0-based head (figures: 'head 1', 'h1' is head 0)"),
]


#: table → [(column, type, meaning)]
COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "runs": [
        (
            "trial_id",
            "text",
            "the trial's key: c<cell>-s<sample> in a study (grid cell, sample index; stable "
            "across retries and resumes), the --trial-id (default: the --out folder) of study train",
        ),
        ("study", "text", "study name"),
        ("name", "text", "model name for people, e.g. 'SA quadratic isotropic (N_h=9)'"),
        ("arch", "text", "sa (attention-only) | resnet18"),
        (
            "encoding",
            "text",
            "the positional encoding's registered name (quadratic, learned, learned_content, …; "
            "`study models` lists every one); null for resnet18",
        ),
        ("isotropic", "bool", "quadratic heads: Σ⁻¹ = s²I (true) or A Aᵀ (false); null otherwise"),
        (
            "positional_score",
            "text",
            "learned encodings: query (q_h·r_δ, the paper's content model)"  # Section 4.2
            " | head (w_h·r_δ); null otherwise",
        ),
        ("num_heads", "int", "N_h, heads per layer"),
        ("pos_dim", "int", "D_p, dimension of the relative positional encoding (3 / 5 for quadratic)"),
        ("hidden", "int", "D, token dimension (400 in the paper)"),
        ("layers", "int", "attention blocks"),
        ("intermediate", "int", "feed-forward width"),
        ("dropout", "float", "dropout probability after each sub-layer"),
        ("attention_dropout", "float", "dropout probability on attention probabilities"),
        ("image_size", "int", "input side in pixels"),
        ("in_channels", "int", "input channels"),
        ("num_classes", "int", "classes of the data actually loaded"),
        ("downsample", "int", "space-to-depth factor (2: 32×32×3 → 16×16×12)"),
        ("center_init_std", "float", "Gaussian heads: std of the initial centres Δ_h, grid pixels"),
        ("spread_init_std", "float", "Gaussian heads: std of the initial spread noise"),
        ("data", "text", "data source as given (synthetic[:N], cifar10[:ROOT], a folder or archive path)"),
        ("data_source", "text", "what was loaded, with subset and held-out sizes, for reports"),
        ("subset", "int", "training images kept (class-stratified, drawn with the seed); null = all"),
        (
            "validation",
            "int|float",
            "training images held out for validation as configured: a count (0 = "
            "none) or a fraction of the training images",
        ),
        ("n_train", "int", "training images actually trained on (after subset and validation hold-out)"),
        ("n_val", "int", "validation images actually held out (0 = no validation split)"),
        ("n_test", "int", "test images actually evaluated (after the subset cap max(subset/5, 100))"),
        ("epochs", "int", "epochs planned"),
        ("batch_size", "int", "training batch size per rank (the global batch is batch_size × world_size)"),
        ("lr", "float", "base (peak) learning rate of the schedule"),
        ("momentum", "float", "SGD momentum"),
        ("weight_decay", "float", "weight decay (not on Gaussian centres/spreads)"),
        (
            "warmup",
            "float",
            "linear warm-up, fraction of all training steps (the paper's 0.05 where no form is "
            "given); null when warmup_epochs or warmup_steps gives it",
        ),
        (
            "warmup_epochs",
            "float",
            "linear warm-up in epochs, where given so (else null; absent in studies "
            "written before the column)",
        ),
        (
            "warmup_steps",
            "int",
            "linear warm-up in optimisation steps, where given so (else null; absent in "
            "studies written before the column)",
        ),
        ("schedule", "text", "cosine (stepped per iteration) | step (ResNet18 recipe)"),
        ("seed", "int", "seed of initialisation, data order, augmentation, subset and validation split"),
        (
            "cutmix_alpha",
            "float",
            "training protocol: CutMix, box ratio ~ Beta(α, α) on each training batch (0: off)",
        ),
        (
            "mixup_alpha",
            "float",
            "training protocol: MixUp, mixing ratio ~ Beta(α, α) (0: off; with CutMix one of "
            "the two per batch)",
        ),
        ("randaugment_ops", "int", "training protocol: RandAugment operations per training image (0: off)"),
        ("randaugment_magnitude", "int", "training protocol: RandAugment's magnitude (0-30)"),
        (
            "autoaugment",
            "text",
            "training protocol: AutoAugment policy per training image (none | cifar10 | imagenet | svhn)",
        ),
        (
            "label_smoothing",
            "float",
            "training protocol: cross-entropy label smoothing ε of the training loss "
            "(test/validation losses are plain)",
        ),
        ("amp", "bool", "bf16 autocast requested (used on CUDA only)"),
        ("compile", "bool", "torch.compile requested"),
        ("head_stats", "bool", "heads/maps tables written"),
        ("head_images", "int", "test images whose content attention the heads/maps of content heads average"),
        ("map_radius", "int", "r of the stored (2r+1)×(2r+1) attention window in maps"),
        (
            "map_epochs",
            "text|list<int>",
            "epochs (0-based) whose attention maps are stored: auto (first ten, "
            "log-spaced, last), all, last, none, or a list",
        ),
        ("eval_batch_size", "int", "batch size of evaluation"),
        ("sampled_<field>", "as the field", "the value Optuna sampled for <field> (also in <field>)"),
        ("cell", "int", "grid cell index (0-based) of a study"),
        ("sample", "int", "sample index within the grid cell (0-based)"),
        ("ray_trial_id", "text", "Ray Tune's id of the (last) Ray trial that ran it: bookkeeping only"),
        (
            "selection_metric",
            "text",
            "the metric Optuna/ASHA selected on (val_acc, or test_acc when the study "
            "asked); null when nothing selects (a pure grid)",
        ),
        ("status", "text", "running | finished | diverged | stopped (ASHA) | interrupted | error"),
        ("error", "text", "one-line cause of an error status ('ExceptionType: message'), else null"),
        (
            "failed_to_train",
            "text",
            "why the trial did not train after its warm-up (its latest epoch's training "
            "and test losses above ln C, chance's, or its test accuracy within 3 σ of "
            "chance: study/trial/verdict.py), else "
            "null; such a trial's accuracy is no result (Table 1 leaves it out, figures "
            "and `study status` say so); absent in studies written before the column",
        ),
        ("epochs_done", "int", "epochs completed (the last finite one for a diverged trial)"),
        ("best_test_acc", "float", "highest test accuracy over the epochs done"),
        ("final_test_acc", "float", "test accuracy after the last epoch done"),
        ("best_val_acc", "float", "highest validation accuracy over the epochs done (null without a split)"),
        ("final_val_acc", "float", "validation accuracy after the last epoch done (null without a split)"),
        ("n_params", "int", "trainable parameters"),
        (
            "flops",
            "int",
            "FLOPs of one evaluation-mode forward of one image on the executed path "
            "(torch.utils.flop_counter: 2 per multiply-add of matmuls/convolutions; factorised "
            "attention where exact); Table 1 also gives the MACs of the model's equations",
        ),
        ("device", "text", "cpu or the GPU's name"),
        ("world_size", "int", "DDP ranks"),
        ("attempts", "int", "times the trial was started (retries and resumes count)"),
        (
            "device_seconds",
            "float",
            "wall seconds of training and evaluation × ranks (head statistics excluded)",
        ),
        ("updated_at", "float", "when the row was last written: Unix time in seconds (UTC), fractional"),
    ],
    "epochs": [
        *KEYS[:2],
        (
            "train_loss",
            "float",
            "mean cross-entropy over the epoch's training batches (nats), as trained: "
            "augmented images, dropout on, weights changing during the epoch",
        ),
        ("train_acc", "float", "accuracy over the same batches"),
        (
            "val_loss",
            "float",
            "cross-entropy on the validation split after the epoch, evaluation mode (null without a split)",
        ),
        ("val_acc", "float", "accuracy on the validation split (null without a split); what selection sees"),
        ("test_loss", "float", "cross-entropy on the test split after the epoch, evaluation mode"),
        ("test_acc", "float", "accuracy on the test split after the epoch"),
        ("lr", "float", "learning rate at the epoch's last training step"),
        ("seconds", "float", "wall seconds of the epoch: training and evaluation, not head statistics"),
        ("images_per_s", "float", "training images per second of training time (all ranks)"),
        ("head_stats_seconds", "float", "wall seconds spent writing heads and maps after the epoch"),
    ],
    "heads": [
        *KEYS,
        (
            "attention_distance",
            "float",
            "THE locality measure, the same for every encoding: mean attention distance "
            "Σ_k P[q,k]·‖p_k − p_q‖ between query and key tokens, in grid cells (tokens "
            "of the 16×16 grid), averaged over every query token of the head_images test "
            "images on the real grid, boundaries included (uniform attention: 8.33 on "
            "16×16; a 3×3 convolution's taps: 1.05); absent in studies written before "
            "the column existed",
        ),
        (
            "attention_entropy",
            "float",
            "entropy −Σ_k P[q,k] ln P[q,k] of each query's attention over the grid's "
            "keys, nats, averaged like attention_distance (uniform on 16×16: ln 256 = "
            "5.55)",
        ),
        (
            "center_x",
            "float",
            "canvas moment (centre query, see the notes): mean column shift E[δx] of the head's "
            "attention, grid pixels, right positive",
        ),
        ("center_y", "float", "mean row shift E[δy], grid pixels, DOWN positive"),
        ("cov_xx", "float", "variance of δx, pixels²"),
        ("cov_xy", "float", "covariance of δx and δy, pixels² (y down)"),
        ("cov_yy", "float", "variance of δy, pixels²"),
        (
            "entropy",
            "float",
            "canvas moment: entropy of the centre query's distribution over shifts, nats "
            "(uniform over n pixels: ln n); not attention_entropy",
        ),
        (
            "mean_distance",
            "float",
            "canvas moment: E‖δ‖ of the centre query, pixels (uniform attention: 11.86 on "
            "the unclipped 31×31 canvas of positional heads, 6.14 for content heads' "
            "centre query of a 16×16 grid): NOT comparable across encodings, use "
            "attention_distance",
        ),
        ("max_prob", "float", "largest probability on a single shift (1 = one pixel)"),
        (
            "param_center_x",
            "float",
            "Gaussian heads: the parameter Δ_h's column component, pixels (null for learned heads)",
        ),
        ("param_center_y", "float", "Gaussian heads: Δ_h's row component, pixels, down positive"),
        ("param_inv_cov_xx", "float", "Gaussian heads: Σ_h⁻¹ entry xx, pixels⁻²"),
        ("param_inv_cov_xy", "float", "Gaussian heads: Σ_h⁻¹ entry xy, pixels⁻²"),
        ("param_inv_cov_yy", "float", "Gaussian heads: Σ_h⁻¹ entry yy, pixels⁻²"),
        (
            "gate",
            "float",
            "gated heads (e.g. ConViT's GPSA): the gate σ(λ_h) in [0, 1], the weight of the head's "
            "positional softmax against its content softmax (1 = purely positional); null for "
            "heads without a gate; absent in studies written before the column existed",
        ),
    ],
    "maps": [
        *KEYS,
        (
            "window",
            "int",
            "side 2r+1 of the stored window of shifts −r..r around the query (an SQL keyword: "
            'quote it, "window")',
        ),
        (
            "probs",
            "list<float>",
            "the head's attention probabilities on the window as a flat (2r+1)²-vector, "
            "row-major: index (δy + r)·(2r+1) + (δx + r), δy down; values of the whole "
            "distribution, so their sum is the mass inside the window (≤ 1)",
        ),
    ],
}

NOTES = {
    "runs": "One row per trial, rewritten as it runs. Configuration columns are every model and training "
    "field (new fields appear as new columns); bookkeeping columns (trial_id, cell, sample, ray_trial_id, "
    "attempts, timing, sizes, status) never define a model variant.",
    "epochs": "One row per (trial_id, epoch).",
    "heads": "One row per (trial_id, epoch, layer, head); epoch = -1 is the untrained model (recorded "
    "before the first training step; studies written before it have none). attention_distance and "
    "attention_entropy: every query of the head_images test images on the real grid, the same for "
    "every encoding. Canvas moments (center_*, cov_*, entropy, mean_distance, max_prob): positional "
    "heads a query at the centre of a canvas large enough that no shift is clipped; content heads "
    "the centre query of head_images test images, distributions averaged; right for the Gaussian "
    "heads' centres and contours, not for comparing locality across encodings.",
    "maps": "One row per (trial_id, epoch, layer, head): the attention window around the query (the canvas "
    "moments' distribution); epoch = -1 is the untrained model.",
}
