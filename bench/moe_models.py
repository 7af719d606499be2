"""The MoE models the benches share (no torch import: the grid is drawn without a GPU).

MODELS: (name, hidden, intermediate size, experts, top-k); RANKS: the expert-parallel degrees of RESULTS
section 7's table (where they divide the experts); ROWS: its rows per local expert."""
MODELS = [
    ("deepseek-v3", 7168, 2048, 256, 8),
    ("qwen3-235b-a22b", 4096, 1536, 128, 8),
    ("qwen3-30b-a3b", 2048, 768, 128, 8),
    ("mixtral-8x7b", 4096, 14336, 8, 2),
    ("hidream-i1", 2560, 6912, 4, 2),
]
RANKS = [2, 8]
ROWS = [64, 128, 256, 512, 1024, 4096]
