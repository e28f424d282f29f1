# Port, for transformers v5.2.0, of the LFM2-Audio configuration classes from huggingface/transformers
# src/transformers/models/lfm2_audio/configuration_lfm2_audio.py, the version the search tool gives as find_string
# id 59875036439 (16 698 chars; the tool does not report its commit) — the version that defines
# `tie_audio_embeddings` (default False), which modeling_lfm2_audio.py @ 0945703d reads.  (The version @ 3b67bc08
# pops that key instead and has no preprocessor/encoder classes; the one @ 404aacd9 is a Moshi-based skeleton.)
# Apache-2.0, Copyright 2026 The HuggingFace Inc. team.
# The upstream classes are `@strict` dataclasses with `__post_init__`, which v5.2.0's PreTrainedConfig does not run;
# this file restates them in v5.2.0's keyword style (the style of v5.2.0's ParakeetCTCConfig), field by field: same
# names, defaults, checks and derived values.  Written for tools/audio_reference/make_audio_fixtures.py, which lays
# it over the v5.2.0 tree as transformers.models.lfm2_audio.configuration_lfm2_audio.
import math

from ...configuration_utils import PreTrainedConfig
from ..lfm2.configuration_lfm2 import Lfm2Config
from ..parakeet.configuration_parakeet import ParakeetEncoderConfig


class Lfm2AudioPreprocessorConfig(PreTrainedConfig):
    model_type = "lfm2_audio_preprocessor"

    def __init__(self, sample_rate=16_000, normalize="per_feature", window_size=0.025, window_stride=0.01,
                 window="hann", features=128, n_fft=512, log=True, frame_splicing=1, dither=1e-5, pad_to=0,
                 pad_value=0.0, **kwargs):
        self.sample_rate = sample_rate
        self.normalize = normalize
        self.window_size = window_size
        self.window_stride = window_stride
        self.window = window
        self.features = features
        self.n_fft = n_fft
        self.log = log
        self.frame_splicing = frame_splicing
        self.dither = dither
        self.pad_to = pad_to
        self.pad_value = pad_value
        super().__init__(**kwargs)


class Lfm2AudioEncoderConfig(PreTrainedConfig):
    model_type = "lfm2_audio_encoder"

    def __init__(self, feat_in=128, feat_out=-1, num_hidden_layers=17, hidden_size=512, subsampling="dw_striding",
                 subsampling_factor=8, subsampling_conv_channels=256, causal_downsampling=False, reduction=None,
                 reduction_position=None, reduction_factor=1, ff_expansion_factor=4, self_attention_model="rel_pos",
                 num_attention_heads=8, att_context_size=None, xscaling=False, untie_biases=True, pos_emb_max_len=5000,
                 conv_kernel_size=9, conv_norm_type="batch_norm", conv_context_size=None, dropout=0.1,
                 dropout_pre_encoder=0.1, dropout_emb=0.0, dropout_att=0.1, **kwargs):
        self.feat_in = feat_in
        self.feat_out = feat_out
        self.num_hidden_layers = num_hidden_layers
        self.hidden_size = hidden_size
        self.subsampling = subsampling
        self.subsampling_factor = subsampling_factor
        self.subsampling_conv_channels = subsampling_conv_channels
        self.causal_downsampling = causal_downsampling
        self.reduction = reduction
        self.reduction_position = reduction_position
        self.reduction_factor = reduction_factor
        self.ff_expansion_factor = ff_expansion_factor
        self.self_attention_model = self_attention_model
        self.num_attention_heads = num_attention_heads
        self.att_context_size = att_context_size
        self.xscaling = xscaling
        self.untie_biases = untie_biases
        self.pos_emb_max_len = pos_emb_max_len
        self.conv_kernel_size = conv_kernel_size
        self.conv_norm_type = conv_norm_type
        self.conv_context_size = conv_context_size
        self.dropout = dropout
        self.dropout_pre_encoder = dropout_pre_encoder
        self.dropout_emb = dropout_emb
        self.dropout_att = dropout_att
        super().__init__(**kwargs)

    def to_parakeet_config(self) -> ParakeetEncoderConfig:
        """Translate the released NeMo-style config to Transformers' FastConformer config."""
        if self.subsampling != "dw_striding":
            raise ValueError(f"LFM2-Audio only supports `subsampling='dw_striding'`, got {self.subsampling!r}.")
        if self.self_attention_model != "rel_pos":
            raise ValueError(
                f"LFM2-Audio only supports relative-position attention, got {self.self_attention_model!r}."
            )
        if self.conv_norm_type != "batch_norm":
            raise ValueError(f"LFM2-Audio only supports batch-norm convolutions, got {self.conv_norm_type!r}.")
        if self.reduction is not None or self.reduction_factor != 1:
            raise ValueError("LFM2-Audio checkpoints with an additional encoder reduction stage are not supported.")
        return ParakeetEncoderConfig(
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.hidden_size * self.ff_expansion_factor,
            hidden_act="silu",
            attention_bias=True,
            convolution_bias=True,
            conv_kernel_size=self.conv_kernel_size,
            subsampling_factor=self.subsampling_factor,
            subsampling_conv_channels=self.subsampling_conv_channels,
            num_mel_bins=self.feat_in,
            subsampling_conv_kernel_size=3,
            subsampling_conv_stride=2,
            dropout=self.dropout_pre_encoder,
            dropout_positions=self.dropout_emb,
            layerdrop=0.0,
            activation_dropout=self.dropout,
            attention_dropout=self.dropout_att,
            max_position_embeddings=self.pos_emb_max_len,
            scale_input=self.xscaling,
        )


class Lfm2AudioDepthConfig(PreTrainedConfig):
    model_type = "lfm2_audio_depth"

    def __init__(self, layers=6, dim=1024, tie=True, num_attention_heads=32, num_key_value_heads=8,
                 intermediate_size=None, multiple_of=256, norm_eps=1e-5, rope_theta=1_000_000.0, **kwargs):
        self.layers = layers
        self.dim = dim
        self.tie = tie
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.intermediate_size = intermediate_size
        self.multiple_of = multiple_of
        self.norm_eps = norm_eps
        self.rope_theta = rope_theta
        if self.intermediate_size is None:
            swiglu_size = int(2 * (4 * self.dim) / 3)
            self.intermediate_size = self.multiple_of * math.ceil(swiglu_size / self.multiple_of)
        if self.dim % self.num_attention_heads != 0:
            raise ValueError("`depthformer.dim` must be divisible by `num_attention_heads`.")
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError("`num_attention_heads` must be divisible by `num_key_value_heads`.")
        super().__init__(**kwargs)


class Lfm2AudioConfig(PreTrainedConfig):
    model_type = "lfm2_audio"
    sub_configs = {
        "preprocessor": Lfm2AudioPreprocessorConfig,
        "encoder": ParakeetEncoderConfig,
        "lfm": Lfm2Config,
        "depthformer": Lfm2AudioDepthConfig,
    }

    def __init__(self, codebooks=8, tie_audio_embeddings=False, semantic_codebook_factor=100.0, codebook_weight="log",
                 text_loss_multiplier=1.0, audio_loss_multiplier=1.0, interleaved_n_text=6, interleaved_n_audio=12,
                 preprocessor=None, encoder=None, lfm=None, depthformer=None, audio_vocab_size=2049,
                 audio_token_id=133, audio_start_token_id=128, text_end_token_id=130, audio_eos_token_id=2048,
                 tie_word_embeddings=True, **kwargs):
        self.codebooks = codebooks
        self.tie_audio_embeddings = tie_audio_embeddings
        self.codebook_weight = codebook_weight
        self.interleaved_n_text = interleaved_n_text
        self.interleaved_n_audio = interleaved_n_audio
        self.audio_vocab_size = audio_vocab_size
        self.audio_token_id = audio_token_id
        self.audio_start_token_id = audio_start_token_id
        self.text_end_token_id = text_end_token_id
        self.audio_eos_token_id = audio_eos_token_id
        self.tie_word_embeddings = tie_word_embeddings
        self.semantic_codebook_factor = float(semantic_codebook_factor)
        self.text_loss_multiplier = 1.0 if text_loss_multiplier is None else float(text_loss_multiplier)
        self.audio_loss_multiplier = 1.0 if audio_loss_multiplier is None else float(audio_loss_multiplier)

        if isinstance(preprocessor, dict):
            preprocessor = Lfm2AudioPreprocessorConfig(**preprocessor)
        elif preprocessor is None:
            preprocessor = Lfm2AudioPreprocessorConfig()
        self.preprocessor = preprocessor

        if isinstance(encoder, dict):
            if encoder.get("model_type") == "parakeet_encoder":
                encoder = ParakeetEncoderConfig(**encoder)
            else:
                encoder = dict(encoder)
                for legacy_name, canonical_name in {
                    "n_layers": "num_hidden_layers",
                    "d_model": "hidden_size",
                    "n_heads": "num_attention_heads",
                }.items():
                    if legacy_name in encoder:
                        encoder.setdefault(canonical_name, encoder.pop(legacy_name))
                encoder = Lfm2AudioEncoderConfig(**encoder).to_parakeet_config()
        elif isinstance(encoder, Lfm2AudioEncoderConfig):
            encoder = encoder.to_parakeet_config()
        elif encoder is None:
            encoder = Lfm2AudioEncoderConfig().to_parakeet_config()
        self.encoder = encoder

        if isinstance(lfm, dict):
            lfm = Lfm2Config(**lfm)
        elif lfm is None:
            lfm = Lfm2Config()
        self.lfm = lfm

        if isinstance(depthformer, dict):
            depthformer = Lfm2AudioDepthConfig(**depthformer)
        elif depthformer is None:
            depthformer = Lfm2AudioDepthConfig()
        self.depthformer = depthformer

        if self.codebook_weight not in {"log", "linear"}:
            raise ValueError("`codebook_weight` must be either 'log' or 'linear'.")
        if self.audio_vocab_size != self.audio_eos_token_id + 1:
            raise ValueError("`audio_vocab_size` must include all Mimi tokens and the end-of-audio token.")

        kwargs.setdefault("bos_token_id", 1)
        kwargs.setdefault("eos_token_id", self.lfm.eos_token_id)
        kwargs.setdefault("pad_token_id", 0)
        self.hidden_size = self.lfm.hidden_size
        self.vocab_size = self.lfm.vocab_size
        self.initializer_range = self.lfm.initializer_range
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    @property
    def text_config(self) -> Lfm2Config:
        if not isinstance(self.lfm, Lfm2Config):
            raise ValueError("`lfm` was not initialized as an Lfm2Config.")
        return self.lfm

    @property
    def encoder_config(self) -> ParakeetEncoderConfig:
        if not isinstance(self.encoder, ParakeetEncoderConfig):
            raise ValueError("`encoder` was not initialized as a ParakeetEncoderConfig.")
        return self.encoder

    @property
    def preprocessor_config(self) -> Lfm2AudioPreprocessorConfig:
        if not isinstance(self.preprocessor, Lfm2AudioPreprocessorConfig):
            raise ValueError("`preprocessor` was not initialized as an Lfm2AudioPreprocessorConfig.")
        return self.preprocessor

    @property
    def depth_config(self) -> Lfm2AudioDepthConfig:
        if not isinstance(self.depthformer, Lfm2AudioDepthConfig):
            raise ValueError("`depthformer` was not initialized as an Lfm2AudioDepthConfig.")
        return self.depthformer


__all__ = [
    "Lfm2AudioConfig",
    "Lfm2AudioDepthConfig",
    "Lfm2AudioEncoderConfig",
    "Lfm2AudioPreprocessorConfig",
]
