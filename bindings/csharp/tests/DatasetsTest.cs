// Datasets written in C# (issue 35): map-style and iterable datasets give a tensor loader's batches, workers
// call Get from native threads and give the same batches, an exception in a callback fails NextBatch with its
// message (caught before it reaches native frames), a collate, and an iterable with state resumes exactly;
// documents packed into windows ("packing") equal the hand-packed stream's windows and resume exactly.
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
    public class DatasetsTest
    {
        const int N = 22;

        sealed class Rows : MapDataset
        {
            readonly long failAt;
            public Rows(long failAt) { this.failAt = failAt; }
            public override long Length() { return N; }
            public override void Get(long index, Sample sample)
            {
                if (index == failAt) throw new InvalidOperationException("row " + index + " is missing from the table");
                using (var x = Tensor.Of(new float[] { index, -index }, 2))
                using (var y = Tensor.Of(new long[] { 100 + index }))
                {
                    sample.SetInputs(x);
                    sample.SetLabels(y);
                }
            }
        }

        sealed class Stream : IterableDataset
        {
            public long Pos;
            public readonly List<long> Epochs = new List<long>();
            public override void SetEpoch(long epoch) { Epochs.Add(epoch); Pos = 0; }
            public override bool Next(Sample sample)
            {
                if (Pos >= N) return false;
                long i = Pos++;
                using (var x = Tensor.Of(new float[] { i, -i }, 2))
                using (var y = Tensor.Of(new long[] { 100 + i }))
                {
                    sample.SetInputs(x);
                    sample.SetLabels(y);
                }
                return true;
            }
            public override bool Stateful() { return true; }
            public override string State() { return Pos.ToString(); }
            public override void LoadState(string state) { Pos = long.Parse(state); }
        }

        static List<string> Pass(DataLoader dl)
        {
            var outp = new List<string>();
            foreach (Batch b in dl)
                using (b)
                using (var x = b.Inputs())
                using (var y = b.Labels())
                    outp.Add(string.Join(",", x.ToFloatArray()) + "|" + string.Join(",", y.ToLongArray()));
            return outp;
        }

        static DataLoader TensorLoader(string config)
        {
            var x = new float[N * 2];
            var y = new long[N];
            for (int i = 0; i < N; ++i) { x[2 * i] = i; x[2 * i + 1] = -i; y[i] = 100 + i; }
            using (var tx = Tensor.Of(x, N, 2))
            using (var ty = Tensor.Of(y, N))
                return new DataLoader(tx, ty, config);
        }

        [Test]
        public void MapIterableAndWorkersEqualTheTensorLoader()
        {
            const string shuffled = "{\"batch_size\": 3, \"shuffle\": true, \"seed\": 7, \"num_workers\": 2}";
            using (var reference = TensorLoader(shuffled))
            using (var map = DataLoader.FromMapDataset(new Rows(-1), shuffled))
                Assert.IsTrue(Pass(reference).SequenceEqual(Pass(map)));
            var stream = new Stream();
            using (var reference = TensorLoader("{\"batch_size\": 4}"))
            using (var it = DataLoader.FromIterableDataset(stream, "{\"batch_size\": 4}"))
            {
                var want = Pass(reference);
                Assert.IsTrue(want.SequenceEqual(Pass(it)));
                Assert.IsTrue(want.SequenceEqual(Pass(it)));
                Assert.IsTrue(stream.Epochs.SequenceEqual(new long[] { 0, 1 }));
            }
        }

        [Test]
        public void ExceptionInACallbackFailsNextBatch()
        {
            foreach (int w in new[] { 0, 2 })
                using (var dl = DataLoader.FromMapDataset(new Rows(7), "{\"batch_size\": 4, \"num_workers\": " + w + "}"))
                {
                    dl.NextBatch().Dispose();
                    var e = Assert.Catch<AccelError>(() => dl.NextBatch());
                    Assert.IsTrue(e.Message.Contains("row 7 is missing from the table"), e.Message);
                }
        }

        [Test]
        public void IterableResumesFromItsState()
        {
            string dir = Path.Combine(Path.GetTempPath(), "accel-cs-datasets-" + Guid.NewGuid());
            List<string> rest;
            using (var acc = new Accelerator())
            using (var dl = DataLoader.FromIterableDataset(new Stream(), "{\"batch_size\": 3}"))
            {
                acc.PrepareDataloader(dl);
                Pass(dl);
                dl.NextBatch().Dispose();
                dl.NextBatch().Dispose();
                acc.SaveState(dir);
                rest = Pass(dl);
            }
            var stream = new Stream();
            using (var acc = new Accelerator())
            using (var dl = DataLoader.FromIterableDataset(stream, "{\"batch_size\": 3}"))
            {
                acc.PrepareDataloader(dl);
                acc.LoadState(dir);
                Assert.IsTrue(rest.SequenceEqual(Pass(dl)));
                Assert.IsTrue(stream.Epochs.SequenceEqual(new long[] { 1 }));
            }
            Directory.Delete(dir, true);
        }

        // Documents d = 10d, 10d + 1, ... (1 + d % 3 tokens), 9 of them; the state is the next document.
        sealed class Documents : IterableDataset
        {
            public long Pos;
            public override void SetEpoch(long epoch) { Pos = 0; }
            public override bool Next(Sample sample)
            {
                if (Pos >= 9) return false;
                var doc = new long[1 + Pos % 3];
                for (int k = 0; k < doc.Length; ++k) doc[k] = 10 * Pos + k;
                ++Pos;
                using (var x = Tensor.Of(doc, doc.Length)) sample.SetInputs(x);
                return true;
            }
            public override bool Stateful() { return true; }
            public override string State() { return Pos.ToString(); }
            public override void LoadState(string state) { Pos = long.Parse(state); }
        }

        static List<string> TokenPass(DataLoader dl)
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
        public void PacksDocumentsAndResumes()
        {
            const string packing = "{\"batch_size\": 2, \"packing\": {\"block_size\": 3, \"eos_token_id\": -1}}";
            var stream = new List<long>(); // each document, then EOS -1; windows of 4 tokens 3 apart
            for (long d = 0; d < 9; ++d)
            {
                for (long k = 0; k <= d % 3; ++k) stream.Add(10 * d + k);
                stream.Add(-1);
            }
            string dir = Path.Combine(Path.GetTempPath(), "accel-cs-packing-" + Guid.NewGuid());
            List<string> rest;
            using (var acc = new Accelerator())
            using (var dl = DataLoader.FromIterableDataset(new Documents(), packing))
            {
                acc.PrepareDataloader(dl);
                using (var b = dl.NextBatch())
                using (var x = b.Inputs())
                using (var y = b.Labels())
                {
                    Assert.IsTrue(x.ToLongArray().SequenceEqual(stream.Take(6)));          // windows 0 and 1
                    Assert.IsTrue(y.ToLongArray().SequenceEqual(stream.Skip(1).Take(6)));
                }
                dl.NextBatch().Dispose();
                acc.SaveState(dir);
                rest = TokenPass(dl);
                Assert.AreEqual(3, rest.Count); // 27 tokens: 8 full windows and a short one, in batches of 2
            }
            using (var acc = new Accelerator())
            using (var dl = DataLoader.FromIterableDataset(new Documents(), packing))
            {
                acc.PrepareDataloader(dl);
                acc.LoadState(dir);
                Assert.IsTrue(rest.SequenceEqual(TokenPass(dl)));
            }
            Directory.Delete(dir, true);
        }
    }
}
#endif
