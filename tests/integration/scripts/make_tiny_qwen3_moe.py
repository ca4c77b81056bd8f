"""Write a tiny Qwen3-MoE (config and a WordLevel tokenizer, no weights: load it with
load_format="dummy") into DIR. Head dim 128 (the decode kernel's), hidden 256 and expert
intermediate 128 (the fused MoE's multiples), 2 layers, 64 experts (the router GEMM needs N % 64 == 0), top-4.

usage: python make_tiny_qwen3_moe.py DIR
"""

import sys

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig

VOCAB = 512


def main(out_dir: str) -> None:
    cfg = Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                         num_experts=64, num_experts_per_tok=4, decoder_sparse_step=1, max_position_embeddings=1024,
                         torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    cfg.architectures = ["Qwen3MoeForCausalLM"]
    cfg.save_pretrained(out_dir)
    vocab = {"<unk>": 0, **{f"t{i}": i for i in range(1, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="t1", eos_token="t2",
                            pad_token="t3").save_pretrained(out_dir)


if __name__ == "__main__":
    main(sys.argv[1])
