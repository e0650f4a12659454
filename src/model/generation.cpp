#include "model/generation.hpp"

#include "common/error.hpp"
#include "model/gpt_model.hpp"
#include "model/llama_model.hpp"
#include "distributed/communicator.hpp"
#include "parallel/tensor_parallel/split_outputs.hpp"
#include "precision/autocast.hpp"
#include "state/accelerator_state.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>

#include <functional>
#include <memory>
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

// A tensor-parallel model's logits hold this rank's vocabulary columns: the whole vocabulary (padding columns
// dropped) on every rank of the group, so that each picks from all of it. Other logits as they are.
at::Tensor whole_vocabulary(const at::Tensor &logits)
{
    const auto split = parallel::tp::vocab_parallel_of(logits);
    if (!split) return logits;
    return parallel::tp::all_gather_along(logits, *split->group, -1).narrow(-1, 0, split->vocab_size);
}

// What the loop below needs of a decoder: its forward with a key/value cache of its own, and its limits.
struct Decoder {
    std::function<at::Tensor(const at::Tensor &)> step; // next tokens -> logits [B, T, V], the cache grows
    int64_t vocab_size = 0;
    int64_t max_positions = 0; // 0: none (rotary embeddings extend to any position)
    const char *max_positions_key = "";
};

// The decoder behind `model` with a fresh cache (or none: each step reruns the whole sequence).
Decoder decoder_of(Model &model, bool use_cache)
{
    if (auto *gpt = dynamic_cast<GptModel *>(&model)) {
        auto cache = std::make_shared<GptKvCache>();
        Decoder d;
        d.step = [gpt, cache, use_cache](const at::Tensor &x) {
            if (use_cache) return gpt->forward_cached(x, *cache);
            // Under context parallelism forward() takes a rank's part of a sequence; a fresh cache runs it whole.
            GptKvCache fresh;
            return gpt->context_parallel() ? gpt->forward_cached(x, fresh) : gpt->forward(x);
        };
        d.vocab_size = gpt->config().vocab_size;
        d.max_positions = gpt->config().n_positions;
        d.max_positions_key = "n_positions";
        return d;
    }
    if (auto *llama = dynamic_cast<LlamaModel *>(&model)) {
        auto cache = std::make_shared<LlamaKvCache>();
        Decoder d;
        d.step = [llama, cache, use_cache](const at::Tensor &x) {
            if (use_cache) return llama->forward_cached(x, *cache);
            LlamaKvCache fresh; // as gpt's
            return llama->context_parallel() ? llama->forward_cached(x, fresh) : llama->forward(x);
        };
        d.vocab_size = llama->config().vocab_size;
        return d;
    }
    fail(ACCEL_ERR_UNIMPLEMENTED, "model: generation needs a model of type \"gpt\" or \"llama\" "
                                  "(accel_model_create_from_json)");
}

} // namespace

at::Tensor generate(Model &model, const at::Tensor &input_ids, const config::GenerationConfig &o, bool wrapped)
{
    Decoder dec = decoder_of(model, o.use_cache);
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
    const int64_t T = input_ids.size(-1);
    if (dec.max_positions > 0 && T + o.max_new_tokens > dec.max_positions)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "max_new_tokens: " + std::to_string(T) + " prompt tokens + " +
                                             std::to_string(o.max_new_tokens) + " new ones exceed " +
                                             dec.max_positions_key + " " + std::to_string(dec.max_positions));
    if (o.eos_token_id && *o.eos_token_id >= dec.vocab_size)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "eos_token_id: " + std::to_string(*o.eos_token_id) +
                                             " is not below vocab_size " + std::to_string(dec.vocab_size));
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
    const bool was_training = model.is_training();
    model.train(false);
    struct Restore {
        Model *m;
        bool on;
        ~Restore() { m->train(on); }
    } restore{&model, was_training};

    at::Tensor finished = at::zeros({ids.size(0)}, ids.options().dtype(at::kBool));
    at::Tensor out = ids;
    for (int64_t step = 0; step < o.max_new_tokens; ++step) {
        const at::Tensor split_logits = dec.step(o.use_cache && step > 0 ? out.narrow(1, -1, 1) : out);
        at::Tensor next = pick(whole_vocabulary(split_logits).select(1, -1), o, gen);
        // Under tensor parallelism every rank of the group must feed the same tokens to the next step (their
        // generators may differ when no seed was given): rank 0 of the group decides.
        if (o.do_sample)
            if (const auto split = parallel::tp::vocab_parallel_of(split_logits)) split->group->broadcast(next, 0);
        // Under pipeline parallelism every stage runs the next step too (each holds the logits): the first decides.
        if (o.do_sample)
            if (const auto *staged = dynamic_cast<const parallel::pp::PipelineStageModel *>(&model);
                staged != nullptr && staged->pipeline_group())
                staged->pipeline_group()->broadcast(next, 0);
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
