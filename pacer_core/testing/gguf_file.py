"""Write a small Llama causal LM (the tests' tiny random models) as a GGUF file that llama.cpp loads, with
the token strings of its tokenizer: what the tests of the ``gguf`` drafter run, offline and in seconds.

Layout (GGUF's Llama names; llama.cpp's ``convert_hf_to_gguf.py`` writes the same): token_embd, per layer
attn_norm / attn_q / attn_k / attn_v / attn_output / ffn_norm / ffn_gate / ffn_up / ffn_down, output_norm,
output. The query and key rows are permuted from the Hugging Face layout (rotary halves) to llama.cpp's
(interleaved pairs), so the file computes what the model computes. Tensors are stored as float32 (``F32``) or
float16 (``F16``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..llama.model import target_token_strings

LAYER_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}


def rotary_rows_interleaved(weight: np.ndarray, heads: int) -> np.ndarray:
    """[heads * D, in] query or key rows from rotate-half order (x0..x_{D/2-1} | x_{D/2}..) to pairs
    (x0, x_{D/2}, x1, x_{D/2+1}, …), per head."""
    rows, columns = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, columns).swapaxes(1, 2).reshape(rows, columns)


def token_strings(tokenizer, count: int) -> list[str]:
    """The tokenizer's string for ids 0..count-1, as the gguf drafter reads them (a placeholder where it has none)."""
    return [token or f"<unused{index}>" for index, token in enumerate(target_token_strings(tokenizer, count))]


def _rope_theta(config) -> float:
    parameters = getattr(config, "rope_parameters", None) or {}
    return float(parameters.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def _tensor(parameter: torch.Tensor, dtype) -> np.ndarray:
    return parameter.detach().float().cpu().numpy().astype(dtype)


def write_llama_gguf(model, tokenizer, path, float16: bool = False, tokens: list[str] | None = None) -> Path:
    """Write ``model`` (a transformers LlamaForCausalLM) and its tokenizer's strings to ``path``.
    ``tokens``: other token strings (a test's mismatched tokenizer)."""
    import gguf

    config, path = model.config, Path(path)
    vocab = model.get_output_embeddings().weight.shape[0]
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    dtype = np.float16 if float16 else np.float32
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(int(config.hidden_size))
    writer.add_block_count(int(config.num_hidden_layers))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(int(heads))
    writer.add_head_count_kv(int(kv_heads))
    writer.add_rope_dimension_count(int(config.hidden_size // heads))
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(int(vocab))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if float16 else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens or token_strings(tokenizer, vocab))
    writer.add_token_types([gguf.TokenType.NORMAL] * vocab)
    writer.add_token_merges(["t 0"])          # the BPE loader needs a merges list; ids are fed, never split
    state = model.state_dict()
    writer.add_tensor("token_embd.weight", _tensor(state["model.embed_tokens.weight"], np.float32))
    for layer in range(config.num_hidden_layers):
        for hf_name, gguf_name in LAYER_NAMES.items():
            weight = _tensor(state[f"model.layers.{layer}.{hf_name}.weight"], np.float32)
            if gguf_name in ("attn_q", "attn_k"):
                weight = rotary_rows_interleaved(weight, heads if gguf_name == "attn_q" else kv_heads)
            stored = np.float32 if weight.ndim == 1 else dtype      # norms stay float32, as llama.cpp expects
            writer.add_tensor(f"blk.{layer}.{gguf_name}.weight", np.ascontiguousarray(weight.astype(stored)))
    writer.add_tensor("output_norm.weight", _tensor(state["model.norm.weight"], np.float32))
    writer.add_tensor("output.weight", _tensor(model.get_output_embeddings().weight, dtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
