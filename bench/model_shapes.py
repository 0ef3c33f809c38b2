"""The model-shape suite of issue 67: the GEMMs public models run, each with the epilogue its model
runs right after it. An evaluation set: the chooser never trains on it (tests/test_bench_sets.py).

Every GEMM is written from its model's published config (Hugging Face config.json values: hidden
size, intermediate size, heads, key-value heads, head dim, experts and experts per token; the name of
the config is in `source`), never copied from a table. Layout nt throughout: D = X·Wᵀ with W stored
N×K, as torch.nn.Linear stores its weight. M is tokens:
- prefill: a sequence or a batch of them (thousands of tokens);
- decode: one token per sequence, M = the batch (1..64), or a beam;
- moe: one routed expert's tokens, batch tokens × experts per token / experts (routing assumed
  balanced), 32..2048 tokens per expert.

Epilogues in gemmtune's syntax (src/gemmtune/epilogue.py), true to each model:
- bias_col: the layer has a bias and nothing elementwise follows it directly (Qwen2.5's q/k/v, ViT's qkv);
- bias_col+gelu / bias_col+relu: a biased MLP up projection and its activation (ViT, BERT, Whisper:
  GELU; OPT: ReLU). The models use the erf GELU; gemmtune's epilogue is the tanh form, and the peers
  bench_models.py times run the tanh form too, so every column computes one function;
- relu: T5's FFN up (no biases anywhere in T5);
- add: the residual add that directly follows a projection without bias (Llama/Qwen o_proj and
  down_proj, T5's o and wo); bias_col+add where the projection has a bias (ViT, BERT, Whisper, OPT);
- none: the rest. Llama-style gate/up projections feed SwiGLU (silu(gate)·up), which is not a
  gemmtune epilogue yet; MoE expert down projections feed the routing-weighted scatter-add, not one
  either; MLA's low-rank projections feed a norm.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

REGIMES = ("prefill", "decode", "moe")
EPILOGUES = ("none", "bias_col", "bias_col+gelu", "bias_col+relu", "relu", "add", "bias_col+add")
DTYPES = ("bf16", "fp16")
LAYOUT = "nt"  # torch.nn.Linear: D = X·Wᵀ, W stored N×K


@dataclass(frozen=True)
class ModelGemm:
    """One GEMM of one model: D (M×N) = X (M×K) · Wᵀ, then `epilogue`."""

    model: str
    layer: str  # the module's name in the model's code (several names where they share a shape)
    m: int
    n: int
    k: int
    epilogue: str
    regime: str  # prefill / decode / moe
    source: str  # the published config the sizes come from
    tokens: str  # how M was chosen, said plainly

    def __post_init__(self) -> None:
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"{self.model} {self.layer}: epilogue {self.epilogue!r} is not one of {EPILOGUES}")
        if self.regime not in REGIMES:
            raise ValueError(f"{self.model} {self.layer}: regime {self.regime!r} is not one of {REGIMES}")

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.m, self.n, self.k

    def spec(self, dtype: str, with_epilogue: bool = True):
        """The GemmSpec this GEMM runs as, in `dtype` (its epilogue left off unless `with_epilogue`)."""
        from gemmtune.epilogue import Epilogue
        from gemmtune.spec import GemmSpec

        epilogue = Epilogue.parse(self.epilogue if with_epilogue else "none")
        return GemmSpec(self.m, self.n, self.k, LAYOUT, dtype, epilogue)


# --- Llama-style decoders: GQA attention, gated (SwiGLU) MLP ---------------------------------------
@dataclass(frozen=True)
class Decoder:
    model: str
    source: str
    hidden: int  # hidden_size
    intermediate: int  # intermediate_size
    heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    head_dim: int  # hidden_size / num_attention_heads, or head_dim where the config gives it
    qkv_bias: bool = False  # Qwen2/2.5 give q/k/v a bias, o_proj none


def decoder_gemms(cfg: Decoder, tokens: int, regime: str, why: str, mlp: bool = True) -> list[ModelGemm]:
    """q, k/v, o, gate/up and down of one decoder layer at `tokens` tokens (without gate/up and down
    when `mlp` is False: an MoE layer's MLP is its experts)."""
    qkv = "bias_col" if cfg.qkv_bias else "none"
    q_width, kv_width = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    rows = (("q_proj", q_width, cfg.hidden, qkv), ("k_proj/v_proj", kv_width, cfg.hidden, qkv),
            ("o_proj", cfg.hidden, q_width, "add"), ("gate_proj/up_proj", cfg.intermediate, cfg.hidden, "none"),
            ("down_proj", cfg.hidden, cfg.intermediate, "add"))[:5 if mlp else 3]
    return [ModelGemm(cfg.model, layer, tokens, n, k, epi, regime, cfg.source, why) for layer, n, k, epi in rows]


# --- routed MoE experts: a gated MLP per expert ---------------------------------------------------
@dataclass(frozen=True)
class Experts:
    model: str
    source: str
    hidden: int  # hidden_size
    expert_intermediate: int  # moe_intermediate_size (Mixtral: intermediate_size)
    experts: int  # n_routed_experts / num_experts / num_local_experts
    experts_per_token: int  # num_experts_per_tok

    def tokens_per_expert(self, batch_tokens: int) -> int:
        return math.ceil(batch_tokens * self.experts_per_token / self.experts)


def expert_gemms(cfg: Experts, batch_tokens: int) -> list[ModelGemm]:
    """One expert's gate/up and down at its share of `batch_tokens`, routing balanced."""
    m = cfg.tokens_per_expert(batch_tokens)
    why = f"{batch_tokens} tokens x {cfg.experts_per_token} of {cfg.experts} experts"
    rows = (("experts.gate_proj/up_proj", cfg.expert_intermediate, cfg.hidden),
            ("experts.down_proj", cfg.hidden, cfg.expert_intermediate))
    return [ModelGemm(cfg.model, layer, m, n, k, "none", "moe", cfg.source, why) for layer, n, k in rows]


# --- DeepSeek-V3's multi-head latent attention ----------------------------------------------------
@dataclass(frozen=True)
class LatentAttention:
    model: str
    source: str
    hidden: int  # hidden_size
    heads: int  # num_attention_heads
    q_lora_rank: int
    kv_lora_rank: int
    rope_dim: int  # qk_rope_head_dim
    nope_dim: int  # qk_nope_head_dim
    v_dim: int  # v_head_dim


def latent_attention_gemms(cfg: LatentAttention, tokens: int, why: str) -> list[ModelGemm]:
    qk = cfg.nope_dim + cfg.rope_dim
    rows = (("q_a_proj", cfg.q_lora_rank, cfg.hidden, "none"), ("q_b_proj", cfg.heads * qk, cfg.q_lora_rank, "none"),
            ("kv_a_proj_with_mqa", cfg.kv_lora_rank + cfg.rope_dim, cfg.hidden, "none"),
            ("kv_b_proj", cfg.heads * (cfg.nope_dim + cfg.v_dim), cfg.kv_lora_rank, "none"),
            ("o_proj", cfg.hidden, cfg.heads * cfg.v_dim, "add"))
    return [ModelGemm(cfg.model, layer, tokens, n, k, epi, "prefill", cfg.source, why) for layer, n, k, epi in rows]


# --- encoder-style blocks with plain MLPs: ViT, BERT, Whisper, OPT, T5 ------------------------------
@dataclass(frozen=True)
class Block:
    """A transformer block whose MLP is up -> activation -> down, residual adds right after the
    attention output and MLP down projections."""

    model: str
    source: str
    hidden: int
    intermediate: int
    activation: str  # "gelu" or "relu"
    bias: bool  # every linear has a bias (T5: none)
    names: tuple[str, str, str, str]  # q/k/v, attention output, MLP up, MLP down
    fused_qkv: bool = False  # one linear of width 3·hidden (timm's ViT)
    unbiased_key: bool = False  # Whisper: k_proj has no bias, q_proj and v_proj do


def _biased(cfg: Block, then: str = "") -> str:
    parts = (["bias_col"] if cfg.bias else []) + ([then] if then else [])
    return "+".join(parts) or "none"


def block_gemms(cfg: Block, tokens: int, regime: str, why: str, parts: str = "qkv,out,up,down") -> list[ModelGemm]:
    """The named parts of one block at `tokens` tokens."""
    qkv, out, up, down = cfg.names
    rows = []
    if "qkv" in parts:
        if cfg.fused_qkv:
            rows.append((qkv, 3 * cfg.hidden, cfg.hidden, _biased(cfg)))
        elif cfg.unbiased_key:
            module, _, projections = qkv.rpartition(".")
            q, k, v = (f"{module}.{name}" for name in projections.split("/"))
            rows += [(f"{q}/{v.rpartition('.')[2]}", cfg.hidden, cfg.hidden, _biased(cfg)),
                     (k, cfg.hidden, cfg.hidden, "none")]
        else:
            rows.append((qkv, cfg.hidden, cfg.hidden, _biased(cfg)))
    rows += [row for part, row in (("out", (out, cfg.hidden, cfg.hidden, _biased(cfg, "add"))),
                                   ("up", (up, cfg.intermediate, cfg.hidden, _biased(cfg, cfg.activation))),
                                   ("down", (down, cfg.hidden, cfg.intermediate, _biased(cfg, "add"))))
             if part in parts]
    return [ModelGemm(cfg.model, layer, tokens, n, k, epi, regime, cfg.source, why) for layer, n, k, epi in rows]


# --- the published configs ------------------------------------------------------------------------
LLAMA3_8B = Decoder("Llama-3-8B", "meta-llama/Meta-Llama-3-8B", 4096, 14336, 32, 8, 128)
LLAMA3_70B = Decoder("Llama-3-70B", "meta-llama/Meta-Llama-3-70B", 8192, 28672, 64, 8, 128)
QWEN25_7B = Decoder("Qwen2.5-7B", "Qwen/Qwen2.5-7B", 3584, 18944, 28, 4, 128, qkv_bias=True)
QWEN25_14B = Decoder("Qwen2.5-14B", "Qwen/Qwen2.5-14B", 5120, 13824, 40, 8, 128, qkv_bias=True)
QWEN25_72B = Decoder("Qwen2.5-72B", "Qwen/Qwen2.5-72B", 8192, 29568, 64, 8, 128, qkv_bias=True)
QWEN3_30B_A3B = Decoder("Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", 2048, 6144, 32, 4, 128)  # head_dim given: 32x128 > 2048
MIXTRAL_EXPERTS = Experts("Mixtral-8x7B", "mistralai/Mixtral-8x7B-v0.1", 4096, 14336, 8, 2)
DEEPSEEK_V3_EXPERTS = Experts("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", 7168, 2048, 256, 8)
QWEN3_EXPERTS = Experts("Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", 2048, 768, 128, 8)
DEEPSEEK_V3_MLA = LatentAttention("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", 7168, 128, 1536, 512, 64, 128, 128)
VIT_NAMES = ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")  # timm's VisionTransformer (fused qkv)
VIT_B16 = Block("ViT-B/16", "google/vit-base-patch16-224", 768, 3072, "gelu", True, VIT_NAMES, fused_qkv=True)
VIT_L16 = Block("ViT-L/16", "google/vit-large-patch16-224", 1024, 4096, "gelu", True, VIT_NAMES, fused_qkv=True)
BERT_LARGE = Block("BERT-large", "google-bert/bert-large-uncased", 1024, 4096, "gelu", True,
                   ("attention.self.query/key/value", "attention.output.dense", "intermediate.dense", "output.dense"))
WHISPER_NAMES = ("self_attn.q_proj/k_proj/v_proj", "self_attn.out_proj", "fc1", "fc2")
WHISPER_ENCODER = Block("Whisper-large-v3", "openai/whisper-large-v3 (encoder_*)", 1280, 5120, "gelu", True,
                        WHISPER_NAMES, unbiased_key=True)
WHISPER_DECODER = Block("Whisper-large-v3", "openai/whisper-large-v3 (decoder_*)", 1280, 5120, "gelu", True,
                        tuple(f"decoder.{name}" for name in WHISPER_NAMES), unbiased_key=True)
OPT_6_7B = Block("OPT-6.7B", "facebook/opt-6.7b", 4096, 16384, "relu", True,
                 ("self_attn.q_proj/k_proj/v_proj", "self_attn.out_proj", "fc1", "fc2"))
T5_LARGE = Block("T5-large", "google-t5/t5-large", 1024, 4096, "relu", False,
                 ("SelfAttention.q/k/v", "SelfAttention.o", "DenseReluDense.wi", "DenseReluDense.wo"))

VIT_TOKENS = (224 // 16) ** 2 + 1  # 196 patches of a 224x224 image + the class token


def suite() -> tuple[ModelGemm, ...]:
    """The whole suite, in a fixed order (models, then prefill, decode, moe within each)."""
    rows: list[ModelGemm] = []
    rows += decoder_gemms(LLAMA3_8B, 8192, "prefill", "one 8192-token sequence (its context length)")
    rows += decoder_gemms(LLAMA3_8B, 32, "decode", "batch 32")
    rows += decoder_gemms(LLAMA3_70B, 2048, "prefill", "2048-token prompt")
    rows += decoder_gemms(LLAMA3_70B, 8, "decode", "batch 8")
    rows += decoder_gemms(QWEN25_7B, 2048, "prefill", "2048-token prompt")
    rows += decoder_gemms(QWEN25_7B, 1, "decode", "batch 1")
    rows += decoder_gemms(QWEN25_14B, 4096, "prefill", "4096-token prompt")
    rows += decoder_gemms(QWEN25_72B, 48, "decode", "batch 48")
    for batch_tokens in (160, 1000, 8192):
        rows += expert_gemms(MIXTRAL_EXPERTS, batch_tokens)
    rows += latent_attention_gemms(DEEPSEEK_V3_MLA, 2048, "2048-token prompt")
    for batch_tokens in (1536, 12288, 65536):
        rows += expert_gemms(DEEPSEEK_V3_EXPERTS, batch_tokens)
    rows += decoder_gemms(QWEN3_30B_A3B, 4096, "prefill", "4096-token prompt", mlp=False)
    for batch_tokens in (512, 4000, 20480):
        rows += expert_gemms(QWEN3_EXPERTS, batch_tokens)
    rows += block_gemms(VIT_B16, 32 * VIT_TOKENS, "prefill", f"batch 32 x {VIT_TOKENS} tokens")
    rows += block_gemms(VIT_L16, 32 * VIT_TOKENS, "prefill", f"batch 32 x {VIT_TOKENS} tokens")
    rows += block_gemms(BERT_LARGE, 8 * 512, "prefill", "batch 8 x 512 tokens")
    rows += block_gemms(WHISPER_ENCODER, 1500, "prefill", "one 30 s window: 1500 frames")
    rows += block_gemms(WHISPER_DECODER, 5, "decode", "beam search of 5", parts="up,down")
    rows += block_gemms(OPT_6_7B, 2048, "prefill", "2048-token prompt")
    rows += block_gemms(OPT_6_7B, 12, "decode", "batch 12", parts="out,up,down")
    rows += block_gemms(T5_LARGE, 4 * 512, "prefill", "encoder, batch 4 x 512 tokens")
    return tuple(rows)


# A few GEMMs of every regime and epilogue for runs that must stay short (torch.compile's peer).
QUICK = (("Llama-3-8B", "o_proj", 8192), ("Llama-3-8B", "gate_proj/up_proj", 32), ("Llama-3-70B", "down_proj", 8),
         ("Qwen2.5-7B", "k_proj/v_proj", 2048), ("Qwen2.5-7B", "q_proj", 1), ("Qwen2.5-72B", "down_proj", 48),
         ("Mixtral-8x7B", "experts.gate_proj/up_proj", 250), ("DeepSeek-V3", "experts.down_proj", 48),
         ("DeepSeek-V3", "kv_a_proj_with_mqa", 2048), ("Qwen3-30B-A3B", "experts.gate_proj/up_proj", 1280),
         ("ViT-B/16", "mlp.fc1", 6304), ("ViT-B/16", "mlp.fc2", 6304), ("ViT-L/16", "attn.qkv", 6304),
         ("BERT-large", "output.dense", 4096), ("Whisper-large-v3", "decoder.fc1", 5),
         ("OPT-6.7B", "fc1", 2048), ("T5-large", "DenseReluDense.wi", 2048))


def quick_suite() -> tuple[ModelGemm, ...]:
    wanted = set(QUICK)
    return tuple(g for g in suite() if (g.model, g.layer, g.m) in wanted)
