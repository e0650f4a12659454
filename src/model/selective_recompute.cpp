#include "model/selective_recompute.hpp"

#include "common/error.hpp"
#include "model/gpt_model.hpp"
#include "model/llama_model.hpp"

namespace accel {

void apply_selective_recompute(Model &model)
{
    if (auto *gpt = dynamic_cast<GptModel *>(&model)) return gpt->set_selective_recompute(true);
    if (auto *llama = dynamic_cast<LlamaModel *>(&model)) return llama->set_selective_recompute(true);
    fail(ACCEL_ERR_UNIMPLEMENTED, "megatron_lm_plugin.recompute_activation (MEGATRON_LM_RECOMPUTE_ACTIVATIONS): "
                                  "selective recomputation is built for the gpt and llama models only; set it false "
                                  "(activation_checkpointing recomputes whole layers of other models)");
}

} // namespace accel
