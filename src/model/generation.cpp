#include "model/generation.hpp"

#include "common/error.hpp"
#include "model/gpt_model.hpp"
#include "precision/autocast.hpp"
#include "state/accelerator_state.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>

#include <optional>

namespace accel {

namespace {

// The next token of each row from its last logits [B, V].
at::Tensor pick(const at::Tensor &logits, const config::GenerationConfig &o, at::Generator &gen)
{
    if (!o.do_sample) return logits.argmax(-1);
    at::Tensor scores = logits.to(at::kFloat) / o.temperature;
    if (o.top_k > 0 && o.top_k < scores.size(-1)) {
        // HF's TopKLogitsWarper: everything below the k-th largest score is removed.
        at::Tensor kth = std::get<0>(scores.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
        scores = scores.masked_fill(scores < kth, -std::numeric_limits<double>::infinity());
    }
    // Drawn on the host with the seeded CPU generator: the same tokens for a seed on every device.
    return at::multinomial(at::softmax(scores, -1).cpu(), 1, false, gen).squeeze(-1).to(logits.device());
}

} // namespace

at::Tensor generate(Model &model, const at::Tensor &input_ids, const config::GenerationConfig &o, bool wrapped)
{
    auto *gpt = dynamic_cast<GptModel *>(&model);
    if (gpt == nullptr)
        fail(ACCEL_ERR_UNIMPLEMENTED, "model: generation needs a model of type \"gpt\" (accel_model_create_from_json)");
    // Generation runs the model's layers directly (with a KV cache), not the sharding engine's gathering forward:
    // a sharded model's parameters must be whole first (was an internal LibTorch error on empty storage).
    model.check_tensor_access("generate");
    if (!input_ids.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "input_ids: missing");
    if (input_ids.scalar_type() != at::kLong)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("input_ids: expected int64 token ids, got ") +
                                             c10::toString(input_ids.scalar_type()));
    if ((input_ids.dim() != 1 && input_ids.dim() != 2) || input_ids.size(-1) < 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "input_ids: expected a non-empty [batch, seq] or [seq], got shape " +
                                             c10::str(input_ids.sizes()));
    const auto &c = gpt->config();
    const int64_t T = input_ids.size(-1);
    if (T + o.max_new_tokens > c.n_positions)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "max_new_tokens: " + std::to_string(T) + " prompt tokens + " +
                                             std::to_string(o.max_new_tokens) + " new ones exceed n_positions " +
                                             std::to_string(c.n_positions));
    if (o.eos_token_id && *o.eos_token_id >= c.vocab_size)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "eos_token_id: " + std::to_string(*o.eos_token_id) +
                                             " is not below vocab_size " + std::to_string(c.vocab_size));
    const bool unbatched = input_ids.dim() == 1;
    at::Tensor ids = (unbatched ? input_ids.unsqueeze(0) : input_ids).contiguous().to(model.device());

    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>();
    {
        uint64_t seed = 0;
        if (o.seed) {
            seed = *o.seed;
        } else {
            // No seed: one drawn from the default generator, so accel_random_set_seed() still decides it.
            seed = static_cast<uint64_t>(at::randint(0, INT64_MAX, {1}, at::kLong).item<int64_t>());
        }
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_current_seed(seed);
    }
    // A prepared model generates under its accelerator's autocast, as its forward runs (not an unwrapped one).
    std::optional<AutocastScope> autocast;
    if (const AcceleratorState *s = wrapped ? model.prepared_by.get() : nullptr)
        if (s->config.mixed_precision != ACCEL_MIXED_PRECISION_NO && s->config.autocast.enabled)
            autocast.emplace(model.device().type(), autocast_dtype(*s), s->config.autocast.cache_enabled);

    at::NoGradGuard no_grad;
    const bool was_training = gpt->is_training();
    gpt->train(false);
    struct Restore {
        GptModel *m;
        bool on;
        ~Restore() { m->train(on); }
    } restore{gpt, was_training};

    GptKvCache cache;
    at::Tensor finished = at::zeros({ids.size(0)}, ids.options().dtype(at::kBool));
    at::Tensor out = ids;
    for (int64_t step = 0; step < o.max_new_tokens; ++step) {
        at::Tensor logits = o.use_cache ? gpt->forward_cached(step == 0 ? out : out.narrow(1, -1, 1), cache)
                                        : gpt->forward(out);
        at::Tensor next = pick(logits.select(1, -1), o, gen);
        if (o.eos_token_id) {
            next = next.masked_fill(finished, *o.eos_token_id);
            finished = finished | next.eq(*o.eos_token_id);
        }
        out = at::cat({out, next.unsqueeze(1)}, 1);
        if (o.eos_token_id && finished.all().item<bool>()) break;
    }
    return unbatched ? out.squeeze(0) : out;
}

} // namespace accel
