// Checkpoint folders in Accelerate's layout (shared/spec/checkpoint-format.md §1-5, §8): file names,
// automatic naming and rotation, and writing/reading the files of plain lists: torch pickles of state
// dicts (torch_archive.hpp) and safetensors weights. It knows no optimizer, model or Accelerator: the
// Accelerator collects each part's state_dict() and hands the files here (src/accelerator/checkpoint.cpp).
//
// Crash safety: every checkpoint is written into "<parent>/.<name>.accel-tmp", each file and the folder
// fsynced, and renamed into place; temporary folders are never taken for checkpoints, and rotation
// deletes old checkpoints only afterwards.
#pragma once

#include "checkpointing/pickle.hpp"
#include "checkpointing/safetensors.hpp"
#include "checkpointing/tp_pieces.hpp"
#include "config/accelerator_config.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel::ckpt {

// ---- names (spec §1) -------------------------------------------------------------------------------

// Accelerate's suffix rule: i = 0 no suffix, else "_{i}" before the extension ("optimizer_1.bin").
std::string indexed(const std::string &stem, const std::string &ext, size_t i);
// model{_i}.safetensors or pytorch_model{_i}.bin.
std::string weights_name(size_t i, bool safetensors);
std::string random_states_name(int64_t process_index);
std::string custom_checkpoint_name(size_t i);

// ---- folders ---------------------------------------------------------------------------------------

// Where save_state writes, and the older automatic checkpoints that rotation removes once it is written.
struct SaveTarget {
    std::string dir;
    std::vector<std::string> rotate_out;
};
// `output_dir` may be null with automatic checkpoint naming (then it is ignored, as in Accelerate).
// Creates the parent folders. ALREADY_EXISTS for an automatic checkpoint that exists or a path that is a file.
SaveTarget save_target(const config::ProjectConfiguration &project, const char *output_dir, int64_t iteration);
// The entries of a checkpoint folder that hold a prepared object's state (weights, optimizer, scheduler and
// loader files and folders), sorted: load_state refuses a folder with such state when nothing is prepared.
std::vector<std::string> prepared_part_entries(const std::string &dir);
// The folders load_state may read: `input_dir` alone, or (null, automatic naming) every automatic checkpoint,
// newest first (load_state takes the newest that loads).
std::vector<std::string> load_sources(const config::ProjectConfiguration &project, const char *input_dir);

// One file of a checkpoint: a torch pickle of `object`, or (tensors non-null) safetensors weights with
// metadata {"format": "pt"}, or (bytes non-null) those bytes. `name` may lie in a sub-folder ("a/b").
struct CheckpointFile {
    std::string name;
    PyRef object;
    std::shared_ptr<const TensorList> tensors;
    std::shared_ptr<const std::string> bytes;
};
// Writes `files` (this process's share) into the temporary folder of `target` on several threads, then
// publishes the folder and rotates old checkpoints out. `main`: this process prepares and publishes
// the folder; `barrier` waits for every process (between preparing, writing and publishing).
// `before_write` (may be empty) runs on every process with the temporary folder once it exists, before any
// file is written into it (save_state's pre-hooks, which may add files of their own).
void write_checkpoint(const SaveTarget &target, const std::vector<CheckpointFile> &files, bool main,
                      const std::function<void()> &barrier,
                      const std::function<void(const std::string &)> &before_write = {});

// The phases of write_checkpoint, for saves that write on another thread (async_save.hpp).
class TempFolderLock;
struct PreparedCheckpoint {
    SaveTarget target;
    std::string tmp;                       // the temporary folder every process writes into
    bool main = false;                     // this process prepared it and publishes it
    std::shared_ptr<TempFolderLock> lock; // main: held until published or abandoned
};
// Main: removes stale temp folders, locks and creates the temporary folder. Every process calls it, then
// waits for the others before writing.
PreparedCheckpoint prepare_checkpoint(const SaveTarget &target, bool main);
// This process's files into the temporary folder, fsynced, on up to `threads` threads (any thread).
void write_checkpoint_files(const PreparedCheckpoint &p, const std::vector<CheckpointFile> &files, size_t threads);
// Main, once every process's files are written: renames the folder into place, rotates, unlocks.
void publish_checkpoint(PreparedCheckpoint &p);
// Main, after a failure: removes the temporary folder and unlocks.
void abandon_checkpoint(PreparedCheckpoint &p) noexcept;

// SHARDED_STATE_DICT (sharded_folder.hpp): adds the files of `state` in `folder` that this process writes:
// its rank file when it is one of the state's ranks (process_index < world_size: with HYBRID_SHARD the
// first node's), and, on the main process, metadata.json and state.bin (the rest, when there is one).
// Under tensor parallelism (`tp`), `state` holds this tp rank's pieces of its slices (the engine's ranks are those
// of its dp_shard group): every tp rank writes its pieces of the split tensors, tp rank 0 those of the others, as
// rank file shard_rank x tp size + tp rank (the process's own index on the first dp_replicate rank, tp fastest).
struct TpSave {
    int32_t rank = 0, size = 1;
    std::map<std::string, std::pair<TpSplit, uint64_t>> split; // by the state's tensor name: how, its whole size along dim
};
void add_sharded_files(std::vector<CheckpointFile> &files, const std::string &folder, const ShardedState &state,
                       int64_t process_index, bool main, const TpSave *tp = nullptr);
// Every tensor of a sharded folder, whole (assembled from its pieces), in the saved order.
TensorList read_sharded_tensors(const std::string &dir);
// Every tensor of such a source, whole, in its order.
TensorList read_source_tensors(const ShardedSource &src);
// The rest (state.bin) of a sharded folder (DATA_LOSS when missing).
PyRef read_sharded_rest(const std::string &dir);
// A sharded folder (checked whole when this is called) as a source to read by ranges; it stays mapped while
// the source lives.
ShardedSource sharded_source(const std::string &dir);
// Whole tensors as such a source (each one piece); the tensors are held while the source lives.
ShardedSource tensor_source(const TensorList &tensors);

// model{_i}.safetensors if present, else pytorch_model{_i}.bin (NOT_FOUND naming both).
TensorList read_weights(const std::string &dir, size_t i);
// A torch pickle of `dir`, or null when the file does not exist (`required`: NOT_FOUND instead).
PyRef read_object(const std::string &dir, const std::string &name, bool required);
// How many files match ^custom_checkpoint_\d+\.pkl$ in `dir`.
size_t count_custom_checkpoints(const std::string &dir);

// ---- save_model / load_checkpoint_in_model (spec §8) -----------------------------------------------

// Writes a model's state dict into `dir`: one file, or shards with an index past `max_shard_size`;
// stale .bin shards of an earlier save are removed (huggingface's rule).
void write_model_weights(const std::string &dir, const TensorList &state_dict, bool safetensors,
                         uint64_t max_shard_size);
// A .safetensors or torch file, or a folder (sharded with an index, or a single weights file).
TensorList read_model_weights(const std::string &path);
// One weights file: safetensors (by its extension; mapped, not copied) or a torch.save state dict.
TensorList read_weights_file(const std::string &path);

// Accelerate's merge_fsdp_weights (`accel merge-weights`): joins the weights of `input` (merge_weights.hpp's
// MergeSource: safetensors shards with an index, or a SHARDED_STATE_DICT folder) into the file `output`:
// safetensors at the byte level, or (`safe` false) a torch.save pickle of the state dict, as
// pytorch_model.bin is (UNIMPLEMENTED for a dtype this LibTorch lacks). Returns the number of tensors.
size_t merge_weights(const std::string &input, const std::string &output, bool safe);

// ---- pieces exposed for tests ----------------------------------------------------------------------

// The first run of digits in a name ("checkpoint_10" -> 10), or nullopt.
std::optional<int64_t> first_number(const std::string &name);
// Checkpoint folder names in `base`, oldest number first (temporary folders and names without digits
// are ignored).
std::vector<std::string> sorted_checkpoints(const std::string &base);

// huggingface_hub's split_torch_state_dict_into_shards: groups of indices into `tensors`.
struct ShardPlan {
    std::vector<std::vector<size_t>> shards;
    uint64_t total_size = 0;
};
ShardPlan plan_shards(const TensorList &tensors, uint64_t max_shard_size);
// {"metadata": {"total_size": N}, "weight_map": {...}} with 2-space indent and sorted keys, plus "\n".
std::string index_json(uint64_t total_size, const std::vector<std::pair<std::string, std::string>> &weight_map);

} // namespace accel::ckpt
