"""BERT, written by hand in plain PyTorch, weight-for-weight compatible with Hugging Face.

    Bert                            embeddings -> L post-LayerNorm Transformer blocks -> (h, e)
    BertForPreTraining              Bert + MLM head tied to the word embeddings
    BertForSequenceClassification   Bert + pooler ([CLS] -> dense -> tanh) + classifier
    RetroMAEForPreTraining          BertForPreTraining + RetroMAE's one-layer decoder

Checkpoints move both ways between this code and Hugging Face's `transformers` without importing
it (`load_hf_state_dict`, `to_hf_state_dict`, `from_pretrained`, `save_pretrained`): the key map
and the file formats are engine/hf.py's. Faster CPU equivalents of the dropout and attention live
in engine/fast.py, which the training loops install.
"""
import json
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine import hf
from engine.hf import load_hf_state_dict, to_hf_state_dict  # public here: the key map to Hugging Face's names

# name -> (layers, hidden, heads); the intermediate (MLP) width is always 4 * hidden.
SIZES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),  # the paper's BERT-small
    "medium": (8, 512, 8),
    "base": (12, 768, 12),  # the paper's BERT-base
    "large": (24, 1024, 16),
}


@dataclass
class BertConfig:
    vocab_size: int = 30522  # bert-base-uncased WordPiece
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # segment A / B
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02  # init N(0, 0.02)
    pad_token_id: int = 0
    tie_word_embeddings: bool = True  # MLM decoder shares the input embedding matrix
    pooler: bool = False  # BertForPreTraining carries a [CLS] pooler: an --init's, kept (untrained) for export

    @classmethod
    def from_size(cls, name, **overrides):
        """The config of a named size (tiny ... large), with any field overridden."""
        if name not in SIZES:
            raise ValueError(f"unknown model size {name!r}; choose one of {', '.join(SIZES)}")
        layers, hidden, heads = SIZES[name]
        return cls(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                   intermediate_size=4 * hidden, **overrides)

    @classmethod
    def from_dict(cls, d):
        """From a dict such as a Hugging Face config.json; unknown keys are ignored."""
        for key, ours in (("hidden_act", "gelu"), ("position_embedding_type", "absolute")):  # what this code has
            if d.get(key, ours) != ours:
                raise ValueError(f"only {key} {ours!r} is supported, not {d[key]!r}")
        names = {f.name for f in fields(cls)}
        for k in names & d.keys():  # an edited config.json: one line naming the value, not a traceback later
            v, default = d[k], getattr(cls, k)
            if not (type(v) is type(default) or type(v) is int and type(default) is float) or v != v:  # v != v: NaN
                want = {int: "a whole number", float: "a number", bool: "true or false"}[type(default)]
                raise ValueError(f"config value {k} = {json.dumps(v)}: expected {want}")
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_hf_dict(self, architecture="BertForMaskedLM"):
        """A config.json that `transformers.AutoConfig` reads as a BERT config."""
        ours = {k: v for k, v in asdict(self).items() if k != "pooler"}  # the weights say whether there is one
        return {"architectures": [architecture], "model_type": "bert", "hidden_act": "gelu",
                "position_embedding_type": "absolute", **ours}


# ----------------------------------------------------------------------------- blocks

class Embeddings(nn.Module):
    """e = LayerNorm(word + position + token type), then dropout."""

    def __init__(self, cfg):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None):
        T, limit = input_ids.size(1), self.position.num_embeddings
        if T > limit:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings {limit}")
        # Without segment ids every token is segment A: add row 0, skip the gather.
        segment = self.token_type.weight[0] if token_type_ids is None else self.token_type(token_type_ids)
        x = self.word(input_ids) + self.position.weight[:T] + segment  # (B, T, H)
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused q/k/v projection; given a `context`, cross-attention
    (queries from x, keys and values from the context: RetroMAE's decoder)."""

    def __init__(self, cfg):
        super().__init__()
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        self.n_head = cfg.num_attention_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attn_dropout = cfg.attention_probs_dropout_prob
        self.attend = F.scaled_dot_product_attention  # softmax(q k^T / sqrt(hs)) v; fast.speed_up swaps in a CPU one

    def forward(self, x, mask=None, context=None):
        B, T, H = x.shape
        if context is None:
            q, k, v = self.qkv(x).split(H, dim=2)  # 3 x (B, T, H)
        else:  # the same three projections, the query one on x, the key/value ones on the context
            (wq, wkv), (bq, bkv) = self.qkv.weight.split([H, 2 * H]), self.qkv.bias.split([H, 2 * H])
            q, (k, v) = F.linear(x, wq, bq), F.linear(context, wkv, bkv).split(H, dim=2)  # (B, S, H) each
        q, k, v = (t.view(B, -1, self.n_head, H // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # (B, nh, T or S, hs)
        # A boolean mask (True = may attend) never overflows in fp16, unlike the additive
        # -10000 of the original code; mask=None lets SDPA pick its fastest kernel.
        p = self.attn_dropout if self.training else 0.0
        y = self.attend(q, k, v, attn_mask=mask, dropout_p=p)  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, T, H)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))  # exact (erf) GELU, as in BERT


class Block(nn.Module):
    """Post-LayerNorm Transformer block: x = LN(x + Attn(x)); x = LN(x + MLP(x))."""

    def __init__(self, cfg):
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)
        self.mlp_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x, mask=None, context=None):
        x = self.attn_norm(x + self.dropout(self.attn(x, mask, context)))
        return self.mlp_norm(x + self.dropout(self.mlp(x)))


def init_weights(module, std):
    """BERT's init: N(0, std) for matrices and embeddings, zero biases, LayerNorm 1/0."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


# ----------------------------------------------------------------------------- models

class PretrainedMixin:
    """from_pretrained / save_pretrained: Hugging Face-format directories (config.json + weights),
    read and written by engine/hf.py without the `transformers` package."""

    hf_architecture = "BertModel"

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        """Load a directory holding config.json and model.safetensors or pytorch_model.bin."""
        config, weights = hf.read_model_dir(path)
        config = BertConfig.from_dict({**config, "pooler": any(k.endswith("pooler.dense.weight") for k in weights)})
        model = cls(config, **kwargs)
        if fresh := load_hf_state_dict(model, weights):
            print(f"note: {len(fresh)} head weights not in {path} are freshly initialised: "
                  f"{', '.join(sorted(fresh)[:4])}{' ...' if len(fresh) > 4 else ''}")
        return model

    def save_pretrained(self, path, vocab_file=None, do_lower_case=True, **config):
        """Write a directory that `transformers` (AutoConfig, AutoModel*, AutoTokenizer) loads
        unchanged; `config`: extra config.json keys (a classifier's id2label, ...)."""
        cfg = self.config.to_hf_dict(self.hf_architecture)
        if isinstance(self, BertForSequenceClassification):
            cfg["num_labels"] = self.num_labels
            cfg["problem_type"] = "regression" if self.num_labels == 1 else "single_label_classification"
        hf.write_model_dir(path, {**cfg, **config}, to_hf_state_dict(self), vocab_file, do_lower_case)


class Bert(PretrainedMixin, nn.Module):
    """The encoder. forward -> (h, e): the last hidden states *and* the embedding-layer output,
    because TACO's token-alignment loss works on g = h - e (taco.tc_loss)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.apply(lambda m: init_weights(m, config.initializer_range))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        states = self.hidden_states(input_ids, attention_mask, token_type_ids)
        return states[-1], states[0]

    def hidden_states(self, input_ids, attention_mask=None, token_type_ids=None):
        """[e, h_1, ..., h_L]: the embedding-layer output, then every layer's output, each (B, T, H)."""
        # attention_mask: (B, T) of 1 = real token, 0 = padding -> (B, 1, 1, T) over keys
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        states = [self.embeddings(input_ids, token_type_ids)]  # (B, T, H)
        for layer in self.layers:
            states.append(layer(states[-1], mask))
        return states


class MLMHead(nn.Module):
    """dense -> GELU -> LayerNorm -> decoder (the word-embedding matrix when tied) + bias."""

    def __init__(self, config, word_embeddings):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        if config.tie_word_embeddings:
            self.decoder = word_embeddings  # shared parameter, not a copy
        else:  # the paper's Appendix B: separate input and output embeddings
            self.decoder = nn.Embedding(config.vocab_size, config.hidden_size)

    def forward(self, h):
        x = self.norm(F.gelu(self.dense(h)))
        return F.linear(x, self.decoder.weight, self.bias)


class BertForPreTraining(PretrainedMixin, nn.Module):
    """Encoder + MLM head. No next-sentence prediction, as in the paper."""

    hf_architecture = "BertForMaskedLM"

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.bert = Bert(config)
        self.mlm = MLMHead(config, self.bert.embeddings.word)
        self.mlm.apply(lambda m: init_weights(m, config.initializer_range))
        if config.pooler:  # no pre-training loss uses it: frozen, so that an export still has the init's
            self.pooler = nn.Linear(config.hidden_size, config.hidden_size).requires_grad_(False)
            init_weights(self.pooler, config.initializer_range)

    def forward(self, input_ids, labels=None, attention_mask=None, token_type_ids=None, rows=None):
        """-> (logits, h, e). With `labels` (-100 = not predicted) the logits only at the predicted
        positions, (n, V) in the order of labels[labels != -100]: the 85% unscored tokens never pay
        for the vocabulary-wide projection; `rows` (taco.predicted_rows) selects the same positions by
        index, with no host sync on a GPU. Without either: logits at every position, (B, T, V)."""
        h, e = self.bert(input_ids, attention_mask, token_type_ids)
        if rows is not None:
            return self.mlm(h.flatten(0, 1)[rows]), h, e  # (n, H) -> (n, V); an index tensor: no host sync
        return self.mlm(h if labels is None else h[labels != -100]), h, e


class RetroMAEForPreTraining(BertForPreTraining):
    """RetroMAE (Xiao et al., EMNLP 2022): encoder + MLM head + a one-layer decoder that rebuilds
    the text from the sentence embedding, the encoder's last-layer [CLS] state h_X.

    The decoder is one more BERT layer (`Block`) in cross-attention ("enhanced decoding"):
        query stream    H1_i = p_i + h_X         raw position embeddings, no LayerNorm
        content stream  H2   = [h_X, Emb(x_1), ..., Emb(x_N)]   the encoder's embedding module on
                               the *unmasked* ids, its [CLS] slot replaced by h_X
        attention       row i sees the keys that `visible` allows (its own position never)
        residual on the query stream, then the MLP; the MLM head (tied) is shared.
    The decoder is trained and checkpointed with the rest; `save_pretrained` exports only the
    encoder + MLM head (a BertForMaskedLM), as the official code does.
    """

    def __init__(self, config):
        super().__init__(config)  # the encoder is initialised exactly as BertForPreTraining's
        self.decoder = Block(config)
        self.decoder.apply(lambda m: init_weights(m, config.initializer_range))

    def forward(self, input_ids, labels=None, attention_mask=None, token_type_ids=None,
                dec_ids=None, dec_visible=None, dec_labels=None, rows=None):
        """-> (logits, h, e) as BertForPreTraining without `dec_ids`; with them
        (enc_logits, dec_logits, h, e), the decoder's logits only where dec_labels != -100."""
        logits, h, e = super().forward(input_ids, labels, attention_mask, token_type_ids, rows)
        if dec_ids is None:
            return logits, h, e
        d = self.decode(h[:, :1], dec_ids, dec_visible)  # (B, T, H): only [CLS] crosses over
        return logits, self.mlm(d if dec_labels is None else d[dec_labels != -100]), h, e

    def decode(self, cls, ids, visible):
        """cls: (B, 1, H) sentence embedding; ids: (B, T) unmasked; visible: (B, T, T) bool."""
        T = ids.size(1)
        query = self.bert.embeddings.position.weight[:T] + cls  # (B, T, H)
        content = torch.cat([cls, self.bert.embeddings(ids)[:, 1:]], dim=1)  # (B, T, H)
        return self.decoder(query, visible[:, None], context=content)  # mask (B, 1, T, T)


class BertForSequenceClassification(PretrainedMixin, nn.Module):
    """Encoder + pooler + classifier; regression (one output) when num_labels == 1."""

    hf_architecture = "BertForSequenceClassification"

    def __init__(self, config, num_labels=2):
        super().__init__()
        self.config, self.num_labels = config, num_labels
        self.bert = Bert(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        for m in (self.pooler, self.classifier):
            init_weights(m, config.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        h, _ = self.bert(input_ids, attention_mask, token_type_ids)
        pooled = torch.tanh(self.pooler(h[:, 0]))  # the [CLS] token, (B, H)
        return self.classifier(self.dropout(pooled))  # (B, num_labels)
