# Port, for transformers v5.2.0, of Lfm2BidirectionalConfig from huggingface/transformers
# src/transformers/models/lfm2_bidirectional/configuration_lfm2_bidirectional.py @ d25b7800bf25ee544c152cfb7f1e17e8bab3e36b
# (Apache-2.0, Copyright 2026 The HuggingFace Team).  The upstream class is a `@strict` dataclass with
# `__post_init__`, which v5.2.0's PreTrainedConfig does not run; this file restates it in v5.2.0's keyword style
# (the style of v5.2.0's own Lfm2Config), field by field: same names, same defaults, same derived values
# (layer_types from full_attn_idxs, the `tie_embedding` / `block_ff_dim` aliases).  Written for
# tools/retrieval_reference/make_retrieval_fixtures.py, which lays it over the v5.2.0 tree as
# transformers.models.lfm2_bidirectional.configuration_lfm2_bidirectional.
from ...configuration_utils import PreTrainedConfig
from ...modeling_rope_utils import RopeParameters


class Lfm2BidirectionalConfig(PreTrainedConfig):
    model_type = "lfm2_bidirectional"
    keys_to_ignore_at_inference = ["past_key_values"]
    default_theta = 1000000.0

    def __init__(
        self,
        vocab_size: int = 65536,
        hidden_size: int = 2560,
        intermediate_size: int = 12288,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int = 8,
        max_position_embeddings: int = 128_000,
        initializer_range: float = 0.02,
        norm_eps: float = 0.00001,
        use_cache: bool = True,
        pad_token_id: int | None = 0,
        bos_token_id: int | None = 1,
        eos_token_id: int | list[int] | None = 2,
        tie_word_embeddings: bool = True,
        rope_parameters: RopeParameters | dict | None = None,
        conv_bias: bool = False,
        conv_L_cache: int = 3,
        block_multiple_of: int = 256,
        block_ffn_dim_multiplier: float | int = 1.0,
        block_auto_adjust_ff_dim: bool = True,
        full_attn_idxs: list[int] | None = None,
        layer_types: list[str] | None = None,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.norm_eps = norm_eps
        self.use_cache = use_cache
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.tie_word_embeddings = tie_word_embeddings
        self.rope_parameters = rope_parameters
        self.conv_bias = conv_bias
        self.conv_L_cache = conv_L_cache
        self.block_multiple_of = block_multiple_of
        self.block_ffn_dim_multiplier = block_ffn_dim_multiplier
        self.block_auto_adjust_ff_dim = block_auto_adjust_ff_dim
        self.full_attn_idxs = full_attn_idxs
        self.layer_types = layer_types
        # upstream __post_init__
        if self.layer_types is None:
            self.full_attn_idxs = (
                self.full_attn_idxs if self.full_attn_idxs is not None else list(range(self.num_hidden_layers))
            )
            self.layer_types = [
                "full_attention" if i in self.full_attn_idxs else "conv" for i in range(self.num_hidden_layers)
            ]
        self.tie_word_embeddings = kwargs.pop("tie_embedding", self.tie_word_embeddings)
        self.intermediate_size = kwargs.pop("block_ff_dim", self.intermediate_size)
        super().__init__(**kwargs)


__all__ = ["Lfm2BidirectionalConfig"]
