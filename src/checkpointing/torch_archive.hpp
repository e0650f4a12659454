// torch.save / torch.load files (the zip-of-pickle format: data.pkl + data/<key> storage records),
// written with LibTorch's PyTorchStreamWriter straight from tensor memory, pickling only the structure.
#pragma once

#include "checkpointing/pickle.hpp"

#include <string>

namespace accel::ckpt {

// Writes `obj` as torch.save would and fsyncs the file.
void save_torch_file(const std::string &path, const PyObj &obj);
// Reads a torch.save file (any archive name); DATA_LOSS naming the file for anything malformed.
PyRef load_torch_file(const std::string &path);

} // namespace accel::ckpt
