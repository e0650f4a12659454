// FindExecutableBatchSize (C-level checks: tests/capi/test_memory.c): a step failing above a size lands on the
// largest of the sequence that fits, with either factor; other exceptions are rethrown unchanged; reaching zero;
// a real forward pass under max_memory_bytes.
#if NUNIT
using System;
using System.Collections.Generic;
using Accel;
using NUnit.Framework;

namespace Accel.Tests
{
    [TestFixture]
    public class MemoryTest
    {
        static Action<long> FailsAbove(long fits, List<long> tried)
        {
            return batchSize => {
                tried.Add(batchSize);
                if (batchSize > fits)
                    throw new ResourceExhaustedError("out of memory (a test's step)", Library.ACCEL_ERR_RESOURCE_EXHAUSTED);
            };
        }

        [Test]
        public void LandsOnTheLargestSizeThatFits()
        {
            var tried = new List<long>();
            Assert.AreEqual(32, Library.FindExecutableBatchSize(128, null, FailsAbove(37, tried)));
            CollectionAssert.AreEqual(new long[] { 128, 64, 32 }, tried);

            tried.Clear();
            Assert.AreEqual(36, Library.FindExecutableBatchSize(128, "{\"reduce_batch_size_factor\": 0.9}", FailsAbove(37, tried)));
            CollectionAssert.AreEqual(new long[] { 128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36 }, tried);

            tried.Clear(); // .NET's own out-of-memory exception counts too
            Assert.AreEqual(16, Library.FindExecutableBatchSize(64, null, batchSize => {
                tried.Add(batchSize);
                if (batchSize > 20) throw new OutOfMemoryException("heap");
            }));
            CollectionAssert.AreEqual(new long[] { 64, 32, 16 }, tried);
        }

        [Test]
        public void OtherExceptionsPropagateUnchanged()
        {
            var mine = new InvalidOperationException("the data set is gone");
            var tried = new List<long>();
            var thrown = Assert.Throws<InvalidOperationException>(() => Library.FindExecutableBatchSize(64, null, batchSize => {
                tried.Add(batchSize);
                if (batchSize > 32) throw new OutOfMemoryException();
                throw mine;
            }));
            Assert.AreSame(mine, thrown);
            CollectionAssert.AreEqual(new long[] { 64, 32 }, tried);

            tried.Clear();
            var zero = Assert.Throws<ResourceExhaustedError>(() => Library.FindExecutableBatchSize(4, null, FailsAbove(0, tried)));
            StringAssert.Contains("reached zero", zero.Message);
            CollectionAssert.AreEqual(new long[] { 4, 2, 1 }, tried);
            Assert.Throws<InvalidArgumentError>(() => Library.FindExecutableBatchSize(4, "{\"reduce_batch_size_factor\": 1.5}", b => { }));
        }

        [Test]
        public void ForwardUnderAMemoryBudget()
        {
            var seen = new List<string>();
            using (var model = Model.FromJson("{\"type\": \"mlp\", \"widths\": [256, 1024, 4]}")) {
                long found = Library.FindExecutableBatchSize(1024, "{\"max_memory_bytes\": \"4MB\"}", batchSize => {
                    try {
                        using (var x = Tensor.Of(new float[batchSize * 256], batchSize, 256))
                        using (var output = model.Forward(x))
                            seen.Add(batchSize + " ok");
                    } catch (AccelError e) {
                        seen.Add(batchSize + " " + e.StatusName);
                        throw;
                    }
                });
                Assert.AreEqual(256, found);
            }
            CollectionAssert.AreEqual(new[] { "1024 ACCEL_ERR_RESOURCE_EXHAUSTED", "512 ACCEL_ERR_RESOURCE_EXHAUSTED", "256 ok" }, seen);
        }
    }
}
#endif
