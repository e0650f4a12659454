// The bindings' smoke scenario (conventions.md, "Tests") and the C#-specific mappings.
// Built with -d:NUNIT against NUnit 2.6 (nunit-console); without it, the small runner at the end runs
// every [Test] method of the fixture by reflection.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using Accel;
#if NUNIT
using NUnit.Framework;
#endif

namespace Accel.Tests
{
#if !NUNIT
    [AttributeUsage(AttributeTargets.Class)] sealed class TestFixtureAttribute : Attribute {}
    [AttributeUsage(AttributeTargets.Method)] sealed class TestAttribute : Attribute {}
    static class Assert
    {
        public static void AreEqual(object expected, object actual, string msg = "")
        {
            if (!Equals(expected, actual))
                throw new Exception("expected " + expected + ", got " + actual + " " + msg);
        }
        public static void IsTrue(bool c, string msg = "") { if (!c) throw new Exception("assertion failed " + msg); }
        public static void IsFalse(bool c, string msg = "") { IsTrue(!c, msg); }
        public static void IsNull(object o) { IsTrue(o == null, "expected null"); }
        public static void IsNotNull(object o) { IsTrue(o != null, "expected non-null"); }
        public static T Throws<T>(Action a) where T : Exception
        {
            try { a(); } catch (T e) { return e; } catch (Exception e) { throw new Exception("expected " + typeof(T).Name + ", got " + e); }
            throw new Exception("expected " + typeof(T).Name + ", nothing thrown");
        }
        public static T Catch<T>(Action a) where T : Exception { return Throws<T>(a); }
    }
#endif

    [TestFixture]
    public class SmokeTest
    {
        const string ModelSpec = "{\"type\": \"mlp\", \"widths\": [4, 8, 3]}";

        static Tensor[] Data(int n)
        {
            var x = new float[n * 4];
            var y = new long[n];
            for (int i = 0; i < n; ++i) {
                y[i] = i % 3;
                for (int j = 0; j < 4; ++j)
                    x[i * 4 + j] = ((i * 7 + j * 3) % 11) / 11.0f;
            }
            return new[] { Tensor.Of(x, n, 4), Tensor.Of(y, n) };
        }

        [Test]
        public void AbiMatches()
        {
            Assert.AreEqual(Library.BUILT_ABI_VERSION, Library.AbiVersion());
            Assert.IsTrue(Library.VersionString().Length > 0);
        }

        [Test]
        public void SmokeScenario()
        {
            Library.SetSeed(0);
            var acc = new Accelerator("{\"gradient_accumulation_steps\": 2}");
            var model = Model.FromJson(ModelSpec);
            var opt = new Optimizer(model, "{\"type\": \"sgd\", \"lr\": 0.1}");
            var sched = new Scheduler(opt, "{\"type\": \"linear\", \"num_warmup_steps\": 0, \"num_training_steps\": 10}");
            var xy = Data(24); // 6 batches: 2 trained, 2 after the save, repeated after the load, 1 more
            var dl = new DataLoader(xy[0], xy[1], "{\"batch_size\": 4}");
            acc.Prepare(model, opt, dl, sched);
            Assert.AreEqual(2L, acc.GradientAccumulationSteps());

            string p0 = model.ParameterName(0);
            float[] before = model.GetTensor(p0).ToFloatArray();
            var syncs = new List<bool>();
            for (int i = 0; i < 2; ++i) {
                using (var batch = dl.NextBatch())
                using (acc.Accumulate(model))
                using (var input = batch.Inputs())
                using (var labels = batch.Labels())
                using (var output = model.Forward(input))
                using (var loss = Library.ComputeLoss("cross_entropy", output, labels)) {
                    Assert.IsTrue(loss.Item() > 0.0, "loss > 0");
                    acc.Backward(loss);
                    opt.Step();
                    sched.Step();
                    opt.ZeroGrad();
                    syncs.Add(acc.SyncGradients());
                }
            }
            Assert.IsTrue(syncs.SequenceEqual(new[] { false, true }), "sync pattern");
            Assert.AreEqual(2L, acc.Step());
            Assert.AreEqual(1L, sched.GetStepCount());
            Assert.IsFalse(before.SequenceEqual(model.GetTensor(p0).ToFloatArray()), "weights changed");

            // save_state / load_state: two more steps after the load repeat the two steps after the save
            // exactly (weights, optimizer, scheduler, accumulate()'s step and the loader's position).
            string dir = Path.Combine(Path.GetTempPath(), "accel-cs-" + Guid.NewGuid().ToString("N"));
            try {
                // Saved asynchronously: the two steps run while the files are written, and change nothing in them.
                Assert.AreEqual(dir, acc.SaveState(dir, "{\"async\": true}"));
                float[] saved = model.GetTensor(p0).ToFloatArray();
                long savedStep = acc.Step(), savedSchedSteps = sched.GetStepCount();
                float[] first = TwoSteps(acc, model, opt, sched, dl);
                acc.WaitForCheckpoint();
                Assert.IsTrue(File.Exists(Path.Combine(dir, "model.safetensors")), "model.safetensors");
                long firstStep = acc.Step();
                Assert.IsFalse(saved.SequenceEqual(first), "weights changed after save");
                Assert.AreEqual(savedStep + 2, firstStep);
                Assert.AreEqual(dir, acc.LoadState(dir));
                Assert.IsTrue(saved.SequenceEqual(model.GetTensor(p0).ToFloatArray()), "weights restored");
                Assert.AreEqual(savedStep, acc.Step());
                Assert.AreEqual(savedSchedSteps, sched.GetStepCount());
                Assert.IsTrue(first.SequenceEqual(TwoSteps(acc, model, opt, sched, dl)), "same steps after load");
                Assert.AreEqual(firstStep, acc.Step());
            } finally {
                if (Directory.Exists(dir))
                    Directory.Delete(dir, true);
            }

            // An invalid config: InvalidArgumentError, an AccelError naming the JSON path.
            AccelError bad = Assert.Throws<InvalidArgumentError>(() => new Accelerator("{\"kwargs_handlers\": {\"autocast\": {\"enabled\": \"yes\"}}}"));
            Assert.IsTrue(bad.Message.Contains("kwargs_handlers.autocast.enabled"), bad.Message);
            Assert.AreEqual(Library.ACCEL_ERR_INVALID_ARGUMENT, bad.Status);
            Assert.AreEqual("ACCEL_ERR_INVALID_ARGUMENT", bad.StatusName);

            // Free the accelerator before its children: they stay usable.
            acc.Dispose();
            using (var batch = dl.NextBatch())
            using (var input = batch.Inputs())
            using (var output = model.Forward(input))
                Assert.IsTrue(output.Shape.SequenceEqual(new long[] { 4, 3 }), "output shape");
            opt.Step();
            sched.Dispose();
            dl.Dispose();
            opt.Dispose();
            model.Dispose();
            xy[0].Dispose();
            xy[1].Dispose();
        }

        // Two train steps (TrainStep enters Accumulate itself); returns the first parameter afterwards.
        static float[] TwoSteps(Accelerator acc, Model model, Optimizer opt, Scheduler sched, DataLoader dl)
        {
            for (int i = 0; i < 2; ++i)
                using (var batch = dl.NextBatch())
                    acc.TrainStep(model, opt, sched, batch, "cross_entropy");
            return model.GetTensor(model.ParameterName(0)).ToFloatArray();
        }

        [Test]
        public void ProfileWritesAChromeTrace()
        {
            // No output_trace_dir: refused. With one: profile_0.json holds the operators and accel's ranges.
            using (var bare = new Accelerator()) {
                var e = Assert.Throws<FailedPreconditionError>(() => bare.Profile());
                Assert.IsTrue(e.Message.Contains("output_trace_dir"), e.Message);
            }
            string dir = Path.Combine(Path.GetTempPath(), "accel-cs-profile-" + Guid.NewGuid().ToString("N"));
            var acc = new Accelerator("{\"kwargs_handlers\": {\"profile\": {\"output_trace_dir\": \"" + dir + "\"}}}");
            var model = Model.FromJson(ModelSpec);
            var opt = new Optimizer(model, "{\"type\": \"sgd\", \"lr\": 0.1}");
            var xy = Data(8);
            var dl = new DataLoader(xy[0], xy[1], "{\"batch_size\": 4}");
            acc.Prepare(model, opt, dl, null);
            using (acc.Profile())
                using (var batch = dl.NextBatch())
                    acc.TrainStep(model, opt, null, batch, "cross_entropy");
            string trace = File.ReadAllText(Path.Combine(dir, "profile_0.json"));
            Assert.IsTrue(trace.Contains("\"aten::addmm\"") && trace.Contains("\"accel::optimizer_step\""), trace);
            Directory.Delete(dir, true);
        }

        [Test]
        public void CollectivesSingleProcess()
        {
            using (var acc = new Accelerator())
            using (var t = Tensor.Of(new float[] { 1, 2, 3, 4, 5, 6 }, 3, 2)) {
                float[] v = t.ToFloatArray();
                foreach (var output in new[] { acc.Gather(t), acc.GatherForMetrics(t), acc.Reduce(t, "mean"), acc.Reduce(t),
                                               acc.PadAcrossProcesses(t, 0, -1.0, true), acc.SplitBetweenProcesses(t, true) })
                    using (output)
                        Assert.IsTrue(v.SequenceEqual(output.ToFloatArray()), "collective result");
                var bad = Assert.Throws<InvalidArgumentError>(() => acc.Reduce(t, "product"));
                Assert.IsTrue(bad.Message.Contains("reduction"), bad.Message);
                acc.Broadcast(t, 0);
                Assert.IsTrue(v.SequenceEqual(t.ToFloatArray()), "broadcast");
                Assert.Throws<OutOfRangeError>(() => acc.Broadcast(t, 1));
                acc.WaitForEveryone();
                using (acc.MainProcessFirst())
                using (acc.LocalMainProcessFirst())
                    Assert.IsTrue(acc.IsMainProcess(), "main process");
                Assert.Throws<FailedPreconditionError>(() => acc.MainProcessFirstEnd());
                Assert.AreEqual(1, acc.NumLocalProcesses());
                Assert.IsTrue(acc.IsLastProcess(), "last process");
                var ran = new List<string>();
                acc.OnMainProcess(() => ran.Add("main"));
                acc.OnLocalMainProcess(() => ran.Add("local"));
                acc.OnLastProcess(() => ran.Add("last"));
                acc.OnProcess(1, () => ran.Add("one"));
                Assert.IsTrue(ran.SequenceEqual(new[] { "main", "local", "last" }), string.Join(",", ran));
                Assert.AreEqual("single", acc.DistributedBackend());
                Assert.IsTrue(acc.DdpStatsJson().Contains("\"models\""), "ddp stats");
                Assert.AreEqual(0L, acc.GradScalerGrowthTracker());
                Assert.AreEqual(0, Library.ProcessLocalIndex());
                Assert.AreEqual(1, Library.ProcessLocalCount());
                Assert.IsTrue(Library.ProcessIsLocalMain(), "local main");
            }
            var xy = Data(10);
            using (var dl = new DataLoader(xy[0], xy[1], "{\"batch_size\": 4}")) {
                var seen = new List<long[]>();
                foreach (var b in dl)
                    using (b)
                    using (var idx = b.Indices())
                        seen.Add(idx.ToLongArray());
                Assert.AreEqual(3, seen.Count);
                Assert.IsTrue(seen[2].SequenceEqual(new long[] { 8, 9 }), "last batch indices");
            }
        }

        [Test]
        public void CheckpointOptionsBlobsAndSaveModel()
        {
            string dir = Path.Combine(Path.GetTempPath(), "accel-cs-ckpt-" + Guid.NewGuid().ToString("N"));
            string project = Path.Combine(dir, "proj");
            try {
                using (var acc = new Accelerator("{\"project_config\": {\"project_dir\": \"" + project + "\", \"automatic_checkpoint_naming\": true}}"))
                using (var model = Model.FromJson(ModelSpec))
                using (var opt = new Optimizer(model, "{\"type\": \"sgd\", \"lr\": 0.1}")) {
                    acc.Prepare(model, opt, null, null);
                    var blob = System.Text.Encoding.UTF8.GetBytes("first");
                    Assert.AreEqual(0, acc.RegisterBytesForCheckpointing(blob));
                    Assert.AreEqual(1, acc.RegisterBytesForCheckpointing(new byte[0]));
                    Assert.AreEqual(0L, acc.ProjectIteration());
                    Assert.IsFalse(acc.LoadLatestState(), "a fresh start loads nothing");
                    string first = acc.SaveState(null, "{\"safe_serialization\": false}");
                    Assert.AreEqual(Path.Combine(project, "checkpoints", "checkpoint_0"), first);
                    Assert.IsTrue(File.Exists(Path.Combine(first, "pytorch_model.bin")), "pytorch_model.bin");
                    Assert.AreEqual(1L, acc.ProjectIteration());
                    Assert.IsTrue(blob.SequenceEqual(acc.GetCheckpointingBytes(0)), "blob 0");
                    Assert.AreEqual(0, acc.GetCheckpointingBytes(1).Length);
                    Assert.Throws<OutOfRangeError>(() => acc.GetCheckpointingBytes(2));
                    var bad = Assert.Throws<InvalidArgumentError>(() => acc.SaveState(null, "{\"safe_serialization\": \"yes\"}"));
                    Assert.IsTrue(bad.Message.Contains("safe_serialization"), bad.Message);
                    Assert.AreEqual(first, acc.LoadState(null, "{\"strict\": true}"));
                    Assert.IsTrue(acc.LoadLatestState(), "the newest automatic checkpoint");
                    Assert.AreEqual(1L, acc.ProjectIteration());

                    string exported = Path.Combine(dir, "export");
                    acc.SaveModel(model, exported, "{\"max_shard_size\": 200}");
                    Assert.IsTrue(File.Exists(Path.Combine(exported, "model.safetensors.index.json")), "index");
                    Library.SetSeed(5);
                    using (var other = Model.FromJson(ModelSpec)) {
                        string k = model.StateDictKey(0);
                        Assert.IsFalse(model.GetTensor(k).ToFloatArray().SequenceEqual(other.GetTensor(k).ToFloatArray()), "differs");
                        other.LoadCheckpoint(exported, "{\"strict\": true}");
                        for (long i = 0; i < model.StateDictSize(); ++i) {
                            string key = model.StateDictKey(i);
                            Assert.IsTrue(model.GetTensor(key).ToFloatArray().SequenceEqual(other.GetTensor(key).ToFloatArray()), key);
                        }
                        // The shards merged into one pytorch_model.bin (merge_fsdp_weights) load the same weights.
                        string merged = Library.MergeWeights(exported, Path.Combine(dir, "merged"), "{\"safe_serialization\": false}");
                        Assert.IsTrue(merged.EndsWith("pytorch_model.bin"), merged);
                        other.LoadCheckpoint(merged, "{\"strict\": true}");
                        Assert.IsTrue(model.GetTensor(k).ToFloatArray().SequenceEqual(other.GetTensor(k).ToFloatArray()), "merged");
                        Assert.Throws<NotFoundError>(() => other.LoadCheckpoint(Path.Combine(dir, "missing")));
                    }
                }
            } finally {
                if (Directory.Exists(dir))
                    Directory.Delete(dir, true);
            }
        }

        [Test]
        public void DisposedObjectThrows()
        {
            var model = Model.FromJson(ModelSpec);
            model.Dispose();
            model.Dispose();
            var e = Assert.Throws<FailedPreconditionError>(() => model.NumParameters());
            Assert.IsTrue(e.Message.Contains("used after close"), e.Message);
        }

        [Test]
        public void AccumulateEndWithoutBegin()
        {
            using (var acc = new Accelerator()) {
                var e = Assert.Throws<FailedPreconditionError>(() => acc.AccumulateEnd());
                Assert.IsTrue(e is AccelError && e.Status == Library.ACCEL_ERR_FAILED_PRECONDITION, "status");
            }
        }

        [Test]
        public void TensorsAndIteration()
        {
            using (var t = Tensor.Of(new double[] { 1, 2, 3, 4, 5, 6 }, 2, 3)) {
                Assert.IsTrue(t.Shape.SequenceEqual(new long[] { 2, 3 }), "shape");
                Assert.AreEqual(Library.ACCEL_DTYPE_FLOAT64, t.Dtype());
                Assert.IsTrue(t.ToDoubleArray().SequenceEqual(new double[] { 1, 2, 3, 4, 5, 6 }), "values");
                Assert.AreEqual(48, t.ToBytes().Length);
            }
            Assert.Throws<InvalidArgumentError>(() => Tensor.Of(new float[3], 2, 2));
            var xy = Data(10);
            using (var dl = new DataLoader(xy[0], null, "{\"batch_size\": 4}")) {
                int n = 0;
                foreach (var b in dl)
                    using (b) {
                        Assert.IsNull(b.Labels());
                        ++n;
                    }
                Assert.AreEqual(3, n);
            }
            Library.SetSeed(1);
            var m1 = Model.FromJson(ModelSpec);
            Library.SetSeed(2);
            var m2 = Model.FromJson(ModelSpec);
            var sd = m1.StateDict();
            m2.LoadStateDict(sd);
            Assert.IsTrue(sd[0].Value.ToFloatArray().SequenceEqual(m2.GetTensor(sd[0].Key).ToFloatArray()), "state dict");
        }

        sealed class Recorder : TrackerCallback
        {
            public readonly List<string> Seen = new List<string>();
            public override int OnEvent(int evt, string json, long step)
            {
                Seen.Add(evt + " " + step + " " + json);
                return evt == Library.ACCEL_TRACKER_EVENT_LOG && json.Contains("refuse") ? Library.ACCEL_ERR_UNAVAILABLE : 0;
            }
        }

        [Test]
        public void TrackerCallbacks()
        {
            var recorder = new Recorder();
            using (var acc = new Accelerator()) {
                acc.AddTracker("recorder", recorder);
                acc.InitTrackers("run", "{\"lr\": 0.1}", null);
                acc.Log("{\"loss\": 0.5}", 3);
                var e = Assert.Throws<UnavailableError>(() => acc.Log("{\"refuse\": 1}", 4));
                Assert.IsTrue(e.Message.Contains("recorder"), e.Message);
                acc.EndTraining();
            }
            Assert.AreEqual(4, recorder.Seen.Count);
            Assert.IsTrue(recorder.Seen[0].StartsWith(Library.ACCEL_TRACKER_EVENT_INIT + " -1 ") && recorder.Seen[0].Contains("lr"), recorder.Seen[0]);
            Assert.IsTrue(recorder.Seen[1].StartsWith(Library.ACCEL_TRACKER_EVENT_LOG + " 3 ") && recorder.Seen[1].Contains("loss"), recorder.Seen[1]);
            Assert.IsTrue(recorder.Seen[3].StartsWith(Library.ACCEL_TRACKER_EVENT_FINISH + " -1 "), recorder.Seen[3]);
        }

        // ---- typed accessors (bindings/swig/dtypes.i) and SafeHandle freeing ------------------------------
        const int F32 = Library.ACCEL_DTYPE_FLOAT32, F64 = Library.ACCEL_DTYPE_FLOAT64, F16 = Library.ACCEL_DTYPE_FLOAT16,
            BF16 = Library.ACCEL_DTYPE_BFLOAT16, I8 = Library.ACCEL_DTYPE_INT8, U8 = Library.ACCEL_DTYPE_UINT8,
            I16 = Library.ACCEL_DTYPE_INT16, I32 = Library.ACCEL_DTYPE_INT32, I64 = Library.ACCEL_DTYPE_INT64,
            BOOL = Library.ACCEL_DTYPE_BOOL;

        static readonly Dictionary<int, string> DtypeNames = new Dictionary<int, string> {
            { F32, "float32" }, { F64, "float64" }, { F16, "float16" }, { BF16, "bfloat16" }, { I8, "int8" },
            { U8, "uint8" }, { I16, "int16" }, { I32, "int32" }, { I64, "int64" }, { BOOL, "bool" } };

        // Written out independently of dtypes.i: source dtype -> the array types that take it exactly.
        static readonly Dictionary<int, int[]> Exact = new Dictionary<int, int[]> {
            { F32, new[] { F32, F64 } }, { F64, new[] { F64 } }, { F16, new[] { F32, F64 } }, { BF16, new[] { F32, F64 } },
            { I8, new[] { F32, F64, I32, I64 } }, { U8, new[] { F32, F64, I32, I64, U8 } },
            { I16, new[] { F32, F64, I32, I64 } }, { I32, new[] { F64, I32, I64 } }, { I64, new[] { I64 } },
            { BOOL, new[] { F32, F64, I32, I64, U8 } } };

        // Four values each dtype holds exactly.
        static readonly Dictionary<int, double[]> Values = new Dictionary<int, double[]> {
            { F32, new[] { 1.5, -2.25, 0, 3 } }, { F64, new[] { 1.5, -2.25, 0, 1e300 } },
            { F16, new[] { 1.5, -2.25, 0, 3 } }, { BF16, new[] { 1.5, -2.25, 0, 3 } },
            { I8, new double[] { 1, -128, 0, 127 } }, { U8, new double[] { 1, 255, 0, 3 } },
            { I16, new double[] { 300, -32768, 0, 3 } }, { I32, new double[] { 100000, -2147483648.0, 0, 3 } },
            { I64, new double[] { 1L << 40, -2, 0, 3 } }, { BOOL, new double[] { 1, 0, 1, 1 } } };

        static byte[] Encode(int dtype, double x)
        {
            if (dtype == F32) return BitConverter.GetBytes((float)x);
            if (dtype == F64) return BitConverter.GetBytes(x);
            if (dtype == F16) return BitConverter.GetBytes((ushort)(x == 1.5 ? 0x3E00 : x == -2.25 ? 0xC080 : x == 3 ? 0x4200 : 0));
            if (dtype == BF16) return BitConverter.GetBytes((ushort)(BitConverter.ToUInt32(BitConverter.GetBytes((float)x), 0) >> 16));
            if (dtype == I8 || dtype == U8 || dtype == BOOL) return new[] { (byte)(long)x };
            if (dtype == I16) return BitConverter.GetBytes((short)x);
            if (dtype == I32) return BitConverter.GetBytes((int)x);
            return BitConverter.GetBytes((long)x);
        }

        static double[] Read(Tensor t, int to)
        {
            if (to == F32) return t.ToFloatArray().Select(v => (double)v).ToArray();
            if (to == F64) return t.ToDoubleArray();
            if (to == I32) return t.ToIntArray().Select(v => (double)v).ToArray();
            if (to == I64) return t.ToLongArray().Select(v => (double)v).ToArray();
            return t.ToByteArray().Select(v => (double)v).ToArray();
        }

        [Test]
        public void EveryDtypeThroughEveryAccessor()
        {
            foreach (var from in DtypeNames.Keys) {
                var raw = Values[from].SelectMany(v => Encode(from, v)).ToArray();
                using (var t = Tensor.FromRaw(raw, from, Values[from].Length)) {
                    Assert.AreEqual(from, t.Dtype());
                    foreach (var to in new[] { F32, F64, I32, I64, U8 }) {
                        string what = DtypeNames[from] + " -> " + DtypeNames[to];
                        if (Exact[from].Contains(to)) {
                            Assert.IsTrue(Read(t, to).SequenceEqual(Values[from]), what);
                        } else {
                            var e = Assert.Throws<InvalidArgumentError>(() => Read(t, to));
                            Assert.IsTrue(e.Message.Contains("dtype is " + DtypeNames[from] + ", and " + DtypeNames[to] + " cannot"),
                                          what + ": " + e.Message);
                        }
                    }
                }
            }
        }

        // The cases: int32 read as floats returned reinterpreted bits, int64 a byte count.
        [Test]
        public void ReportedDtypeCases()
        {
            using (var t = Tensor.Of(new[] { 1, 2, 3, 4 }, 4)) {
                var e = Assert.Throws<InvalidArgumentError>(() => t.ToFloatArray());
                Assert.AreEqual("ToFloatArray: the tensor's dtype is int32, and float32 cannot hold every int32 value exactly; " +
                                "read it as float64, int32, int64", e.Message);
                Assert.IsTrue(t.ToDoubleArray().SequenceEqual(new double[] { 1, 2, 3, 4 }), "int32 -> float64");
            }
            using (var t = Tensor.Of(new long[] { 1, 2, 3, 4 }, 4)) {
                var e = Assert.Throws<InvalidArgumentError>(() => t.ToFloatArray());
                Assert.IsTrue(e.Message.StartsWith("ToFloatArray: the tensor's dtype is int64"), e.Message);
            }
        }

        [Test]
        public void LoadCheckpointWithReport()
        {
            string dir = Path.Combine(Path.GetTempPath(), "accel-cs-report-" + Guid.NewGuid());
            try {
                using (var acc = new Accelerator(null))
                using (var model = Model.FromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 3]}"))
                using (var bigger = Model.FromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 3, 3]}")) {
                    acc.Prepare(model, null, null, null);
                    acc.SaveModel(model, dir, null);
                    Assert.AreEqual("{\"missing_keys\": [\"4.weight\", \"4.bias\"], \"unexpected_keys\": [], \"tied_keys\": []}",
                                    bigger.LoadCheckpointWithReport(dir));
                    Assert.Throws<NotFoundError>(() => bigger.LoadCheckpointWithReport(Path.Combine(dir, "missing")));
                }
            } finally {
                if (Directory.Exists(dir)) Directory.Delete(dir, true);
            }
        }

        [Test]
        public void PretrainedRoundTrip()
        {
            string dir = Path.Combine(Path.GetTempPath(), "accel-cs-pretrained-" + Guid.NewGuid());
            try {
                using (var model = Model.FromJson("{\"type\": \"gpt\", \"vocab_size\": 23, \"n_positions\": 16, \"n_embd\": 16, \"n_layer\": 2, \"n_head\": 2}")) {
                    model.SavePretrained(dir, "{\"max_shard_size\": \"10KB\"}");
                    Assert.IsTrue(File.Exists(Path.Combine(dir, "model.safetensors.index.json")));
                    using (var back = Model.FromPretrained(dir, null)) {
                        Assert.AreEqual(model.NumParameters(), back.NumParameters());
                        for (long i = 0; i < model.NumParameters(); ++i) {
                            string name = model.ParameterName(i);
                            using (var a = model.GetTensor(name))
                            using (var b = back.GetTensor(name))
                                Assert.IsTrue(a.ToFloatArray().SequenceEqual(b.ToFloatArray()), name);
                        }
                    }
                    var e = Assert.Throws<NotFoundError>(() => Model.FromPretrained(Path.Combine(dir, "missing"), null));
                    Assert.IsTrue(e.Message.Contains("does not exist"), e.Message);
                }
            } finally {
                if (Directory.Exists(dir)) Directory.Delete(dir, true);
            }
        }

        [Test]
        public void ForwardNoGrad()
        {
            using (var acc = new Accelerator(null))
            using (var model = Model.FromJson("{\"type\": \"mlp\", \"widths\": [4, 8, 3]}"))
            using (var x = Tensor.Of(new float[] { 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, -0.5f, 1f, 2f }, 2, 4))
            using (var y = Tensor.Of(new long[] { 0, 2 }, 2)) {
                acc.Prepare(model, null, null, null);
                model.Eval();
                using (var a = model.Forward(x))
                using (var b = model.ForwardNoGrad(x))
                using (var la = Library.ComputeLoss("cross_entropy", a, y))
                using (var lb = Library.ComputeLoss("cross_entropy", b, y)) {
                    Assert.AreEqual(a.ToFloatArray(), b.ToFloatArray());
                    acc.Backward(la);
                    Assert.Throws<InvalidArgumentError>(() => acc.Backward(lb));
                }
            }
        }

        static void CollectEverything()
        {
            for (int i = 0; i < 3; ++i) {
                GC.Collect();
                GC.WaitForPendingFinalizers();
            }
        }

        // Created on another thread so that no stale stack slot of this one keeps it alive (Mono scans stacks
        // conservatively).
        static WeakReference MakeTensor(bool dispose)
        {
            WeakReference weak = null;
            var th = new System.Threading.Thread(() => {
                var t = Tensor.Of(new float[] { 1f, 2f }, 2);
                if (dispose) {
                    t.Dispose();
                    t.Dispose(); // idempotent
                    Assert.Throws<FailedPreconditionError>(() => t.Numel());
                }
                weak = new WeakReference(t);
            });
            th.Start();
            th.Join();
            return weak;
        }

        [Test]
        public void DisposeThenGcFreesOnce()
        {
            CollectEverything();
            long before = AccelHandle.Releases;
            var weak = MakeTensor(true);
            Assert.AreEqual(before + 1, AccelHandle.Releases, "Dispose() freed the tensor");
            CollectEverything();
            Assert.IsFalse(weak.IsAlive, "the disposed tensor was collected");
            Assert.AreEqual(before + 1, AccelHandle.Releases, "Dispose() and the finalizer both freed the tensor");
        }

        [Test]
        public void UndisposedTensorIsFreedByItsSafeHandle()
        {
            CollectEverything();
            long before = AccelHandle.Releases;
            var weak = MakeTensor(false);
            Assert.AreEqual(before, AccelHandle.Releases);
            CollectEverything();
            Assert.IsFalse(weak.IsAlive, "the tensor was collected");
            Assert.AreEqual(before + 1, AccelHandle.Releases, "the SafeHandle freed the unreachable tensor");
        }

        [Test]
        public void ObjectCollectivesInOneProcess()
        {
            // Several processes: tests/distributed/dist_objects.c.
            using (var acc = new Accelerator()) {
                var all = acc.GatherObject(new byte[] { 1, 0, 2 });
                Assert.AreEqual(1, all.Length);
                Assert.IsTrue(all[0].SequenceEqual(new byte[] { 1, 0, 2 }), "gathered bytes");
                Assert.AreEqual(0, acc.GatherObject(new byte[0])[0].Length);
                Assert.IsTrue(acc.BroadcastObject(new byte[] { 9 }, 0).SequenceEqual(new byte[] { 9 }), "broadcast");
                var list = acc.BroadcastObjectList(new List<byte[]> { new byte[] { 7 }, new byte[0] }, 0);
                Assert.AreEqual(2, list.Length);
                Assert.IsTrue(list[0].SequenceEqual(new byte[] { 7 }) && list[1].Length == 0, "broadcast list");
                Assert.AreEqual("[1, {\"a\": 2}]", acc.GatherObjectJson("[1, {\"a\": 2}]"));
                Assert.AreEqual("{\"k\": [true]}", acc.BroadcastObjectJson("{\"k\": [true]}", 0));
                var e = Assert.Throws<InvalidArgumentError>(() => acc.GatherObjectJson("{\"a\": 1}"));
                Assert.IsTrue(e.Message.Contains("expected a JSON array"), e.Message);
                Assert.Throws<OutOfRangeError>(() => acc.BroadcastObject(new byte[] { 1 }, 1));
            }
        }

        sealed class TraceRecords : System.Diagnostics.TraceListener
        {
            public readonly List<string> Lines = new List<string>();
            public override void Write(string message) { }
            public override void WriteLine(string message) { lock (Lines) Lines.Add(message); }
            public override void TraceEvent(System.Diagnostics.TraceEventCache cache, string source,
                                            System.Diagnostics.TraceEventType type, int id, string message)
            {
                lock (Lines) Lines.Add(type + " " + message);
            }
        }

        [Test]
        public void LoggingReachesTrace()
        {
            var records = new TraceRecords();
            System.Diagnostics.Trace.Listeners.Add(records);
            AccelLogging.Install();
            try {
                Library.LogSetLevel(20);
                Assert.AreEqual(20, Library.LogGetLevel());
                Library.LogWrite(null, "accel_test.train", 20, "epoch 3", true, false);
                Library.LogWrite(null, "accel_test.train", 10, "hidden", false, false);
                Library.LogWrite(null, "accel_test.train", 40, "failed", false, false);
                Assert.Throws<InvalidArgumentError>(() => Library.LogSetLevel(99));
                // A library warning (load_checkpoint's keys that did not match) under the name "accel".
                string dir = Path.Combine(Path.GetTempPath(), "accel-cs-log-" + Guid.NewGuid());
                using (var acc = new Accelerator())
                using (var small = Model.FromJson("{\"type\": \"mlp\", \"widths\": [6, 16, 3]}"))
                using (var big = Model.FromJson("{\"type\": \"mlp\", \"widths\": [6, 16, 3, 3]}")) {
                    acc.SaveModel(small, dir);
                    big.LoadCheckpoint(dir);
                }
                Directory.Delete(dir, true);
            } finally {
                AccelLogging.Uninstall();
                Library.LogSetLevel(30);
                System.Diagnostics.Trace.Listeners.Remove(records);
            }
            Assert.AreEqual(3, records.Lines.Count, string.Join(" | ", records.Lines));
            Assert.AreEqual("Information accel_test.train: epoch 3", records.Lines[0]);
            Assert.AreEqual("Error accel_test.train: failed", records.Lines[1]);
            Assert.IsTrue(records.Lines[2].StartsWith("Warning accel: load_checkpoint") && records.Lines[2].Contains("4.weight"), records.Lines[2]);
        }

#if !NUNIT
        public static int Main()
        {
            int failed = 0, passed = 0;
            foreach (var m in typeof(SmokeTest).GetMethods().Where(m => m.GetCustomAttributes(typeof(TestAttribute), false).Length > 0)) {
                try {
                    m.Invoke(new SmokeTest(), null);
                    Console.WriteLine("PASS " + m.Name);
                    ++passed;
                } catch (System.Reflection.TargetInvocationException e) {
                    Console.WriteLine("FAIL " + m.Name + ": " + e.InnerException);
                    ++failed;
                }
            }
            Console.WriteLine(passed + " passed, " + failed + " failed");
            return failed == 0 ? 0 : 1;
        }
#endif
    }
}
