// save_state / load_state pre-hooks (C-level checks: tests/capi/test_state_hooks.c): a StateHook's file lands in the
// checkpoint, a load hook reads it, an exception fails SaveState naming the hook, removal; join_uneven_inputs's scope.
#if NUNIT
using System;
using System.Collections.Generic;
using System.IO;
using Accel;
using NUnit.Framework;

namespace Accel.Tests
{
    [TestFixture]
    public class StateHooksTest
    {
        class WriteHook : StateHook
        {
            public override void Call(string folder, int processIndex)
            {
                File.WriteAllText(Path.Combine(folder, "extra.txt"), "rank " + processIndex);
            }
        }
        class ReadHook : StateHook
        {
            public readonly List<string> Seen = new List<string>();
            public override void Call(string folder, int processIndex)
            {
                Seen.Add(File.ReadAllText(Path.Combine(folder, "extra.txt")));
            }
        }
        class RefuseHook : StateHook
        {
            public override void Call(string folder, int processIndex) { throw new InvalidOperationException("no room for this"); }
        }

        [Test]
        public void HooksAddAndReadFiles()
        {
            string dir = Path.Combine(Path.GetTempPath(), "accel_cs_state_hooks_" + Guid.NewGuid().ToString("N"));
            Directory.CreateDirectory(dir);
            try
            {
                using (var acc = new Accelerator())
                {
                    var reader = new ReadHook();
                    long save = acc.RegisterSaveStatePreHook(new WriteHook());
                    acc.RegisterLoadStatePreHook(reader);
                    string ckpt = Path.Combine(dir, "ckpt");
                    acc.SaveState(ckpt);
                    acc.LoadState(ckpt);
                    Assert.AreEqual(1, reader.Seen.Count);
                    Assert.AreEqual("rank 0", reader.Seen[0]);
                    acc.RemoveStateHook(save);
                    Assert.Throws<NotFoundError>(() => acc.RemoveStateHook(save));
                    long refuse = acc.RegisterSaveStatePreHook(new RefuseHook());
                    var e = Assert.Throws<UnknownError>(() => acc.SaveState(Path.Combine(dir, "refused")));
                    StringAssert.Contains("pre-hook " + refuse + " failed", e.Message);
                    StringAssert.Contains("no room for this", e.Message);
                    Assert.IsFalse(Directory.Exists(Path.Combine(dir, "refused")));
                }
            }
            finally
            {
                Directory.Delete(dir, true);
            }
        }

        [Test]
        public void SaveWritesSafetensors()
        {
            string file = Path.Combine(Path.GetTempPath(), "accel_cs_save_" + Guid.NewGuid().ToString("N") + ".safetensors");
            try
            {
                using (var acc = new Accelerator())
                using (var w = Tensor.Of(new float[] { 1, 2, 3, 4 }, 2, 2))
                {
                    acc.Save(new[] { new KeyValuePair<string, Tensor>("w", w) }, file);
                    byte[] data = File.ReadAllBytes(file);
                    long n = BitConverter.ToInt64(data, 0);
                    string header = System.Text.Encoding.UTF8.GetString(data, 8, (int)n);
                    StringAssert.Contains("\"w\":{\"dtype\":\"F32\",\"shape\":[2,2]", header);
                    Assert.AreEqual(8 + n + 16, (long)data.Length);
                }
            }
            finally
            {
                File.Delete(file);
            }
        }

        [Test]
        public void JoinUnevenInputsScope()
        {
            using (var acc = new Accelerator())
            {
                using (acc.JoinUnevenInputs(null, false))
                    Assert.Throws<FailedPreconditionError>(() => acc.JoinUnevenInputs());
                Assert.Throws<FailedPreconditionError>(() => acc.JoinUnevenInputsEnd());
            }
        }
    }
}
#endif
