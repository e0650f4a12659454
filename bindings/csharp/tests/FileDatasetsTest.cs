// DataLoader.FromFiles (accel_dataloader_create_from_files): a uint16 token file gives FromTokens' batches over
// the same tokens; a missing file is a NotFoundError naming it.
#if NUNIT
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using Accel;
using NUnit.Framework;

namespace Accel.Tests
{
    [TestFixture]
    public class FileDatasetsTest
    {
        static List<string> Pass(DataLoader dl)
        {
            var outp = new List<string>();
            foreach (Batch b in dl)
                using (b)
                using (var x = b.Inputs())
                using (var y = b.Labels())
                    outp.Add(string.Join(",", x.ToLongArray()) + "|" + string.Join(",", y.ToLongArray()));
            return outp;
        }

        [Test]
        public void TokenFileEqualsFromTokens()
        {
            const int n = 300;
            var tokens = new long[n];
            var bytes = new byte[2 * n];
            for (int i = 0; i < n; ++i)
            {
                tokens[i] = (i * 7919L + 3) % 1000;
                bytes[2 * i] = (byte)(tokens[i] & 0xff);
                bytes[2 * i + 1] = (byte)(tokens[i] >> 8);
            }
            string file = Path.GetTempFileName();
            File.WriteAllBytes(file, bytes);
            const string keys = "\"block_size\": 8, \"batch_size\": 4, \"shuffle\": true, \"seed\": 3";
            try
            {
                using (var t = Tensor.Of(tokens, n))
                using (var memory = DataLoader.FromTokens(t, "{" + keys + "}"))
                using (var files = DataLoader.FromFiles("{\"format\": \"tokens\", \"files\": \"" + file +
                                                        "\", \"dtype\": \"uint16\", " + keys + "}"))
                {
                    Assert.AreEqual(memory.Length(), files.Length());
                    var want = Pass(memory);
                    Assert.IsTrue(want.SequenceEqual(Pass(files)));
                    Assert.AreEqual(memory.Length(), want.Count);
                }
            }
            finally
            {
                File.Delete(file);
            }
            var e = Assert.Throws<NotFoundError>(() => DataLoader.FromFiles(
                "{\"format\": \"tokens\", \"files\": \"/nonexistent/cs.bin\", \"dtype\": \"uint16\", \"block_size\": 4}"));
            StringAssert.Contains("/nonexistent/cs.bin", e.Message);
        }
    }
}
#endif
