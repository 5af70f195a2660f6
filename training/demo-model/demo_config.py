"""The demo model's shapes (a Hugging Face DeepSeek-V3 config.json) and the constants training and
export share. model/checkpoint_maker.cpp's "demo" preset reads the exported config, not this file."""

BOS, EOS = 0, 1  # <｜begin▁of▁sentence｜>, <｜end▁of▁sentence｜>
DEEPSEEK_V3_VOCAB = 129280
BIAS_CHANNEL = 0  # see train.py: a constant hidden channel that gives head rows a bias
BIAS_CONSTANT = 1.0


def demo_config(vocab_size=DEEPSEEK_V3_VOCAB):
    return {
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "vocab_size": vocab_size,
        "hidden_size": 192,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_nextn_predict_layers": 1,
        "num_attention_heads": 4,
        "q_lora_rank": 128,
        "kv_lora_rank": 64,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "n_routed_experts": 16,
        "n_shared_experts": 1,
        "num_experts_per_tok": 4,
        "n_group": 4,
        "topk_group": 2,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "routed_scaling_factor": 1.0,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "rope_scaling": None,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "tie_word_embeddings": False,
    }
