// checkpointing/temp_folder: stale temp folders (their writer's lock held by nobody) are removed, live ones
// and folders accel did not make are left alone, and a second writer of the same temp folder is refused.
#include "checkpointing/temp_folder.hpp"
#include "common/error.hpp"
#include "common/files.hpp"

#include <gtest/gtest.h>

#include "fresh_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>
#include <string>

using namespace accel;
using namespace accel::ckpt;

namespace {

void touch(const std::string &path, const std::string &text = "x")
{
    std::ofstream(path) << text;
}

// A temp folder with a lock file as a writer that died leaves it: the lock was taken and then dropped with
// the writer's file descriptor (which is what the kernel does when a process dies, kill -9 included).
void dead_writer(const std::string &tmp)
{
    make_dirs(tmp);
    touch(join(tmp, "model.safetensors"));
    const int fd = ::open((tmp + ".lock").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    ASSERT_EQ(::write(fd, "12345\n", 6), 6);
    ::close(fd);
}

} // namespace

TEST(TempFolder, StaleFoldersAreRemovedLiveAndForeignOnesKept)
{
    const std::string dir = fresh_dir("stale");
    const std::string stale = join(dir, ".checkpoint_3.accel-tmp");
    dead_writer(stale);
    const std::string live = join(dir, ".checkpoint_4.accel-tmp");
    {
        TempFolderLock held(live);
        make_dirs(live);
        // Not made by accel (no lock file), and an ordinary checkpoint: never touched.
        make_dirs(join(dir, ".other.accel-tmp"));
        make_dirs(join(dir, "checkpoint_2"));
        touch(join(dir, ".orphan.accel-tmp.lock")); // a lock file left without its folder
        touch(join(dir, "notes.lock"));

        EXPECT_EQ(remove_stale_temp_folders(dir), 1u);
        EXPECT_FALSE(exists(stale));
        EXPECT_FALSE(exists(stale + ".lock"));
        EXPECT_FALSE(exists(join(dir, ".orphan.accel-tmp.lock")));
        EXPECT_TRUE(is_dir(live)) << "a live writer's folder was removed";
        EXPECT_TRUE(exists(live + ".lock"));
        EXPECT_TRUE(is_dir(join(dir, ".other.accel-tmp")));
        EXPECT_TRUE(is_dir(join(dir, "checkpoint_2")));
        EXPECT_TRUE(exists(join(dir, "notes.lock")));
    }
    // The writer released its lock (and removed the lock file) without publishing: the folder stays until a
    // writer of that name takes it, as it no longer has a lock file.
    EXPECT_FALSE(exists(live + ".lock"));
    EXPECT_EQ(remove_stale_temp_folders(dir), 0u);
    remove_all(dir);
}

TEST(TempFolder, SecondWriterOfTheSameFolderIsRefused)
{
    const std::string dir = fresh_dir("second");
    const std::string tmp = join(dir, ".ckpt.accel-tmp");
    TempFolderLock first(tmp);
    try {
        TempFolderLock second(tmp);
        ADD_FAILURE() << "a second writer took the lock";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_ALREADY_EXISTS);
        EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(getpid())), std::string::npos) << e.what();
    }
    remove_all(dir);
}

TEST(TempFolder, MissingFolderIsNothingToDo)
{
    EXPECT_EQ(remove_stale_temp_folders(::testing::TempDir() + "/accel_temp_folder_does_not_exist"), 0u);
}
