// LOMO through the C# binding (as bindings/python/tests/test_lomo.py): LomoBackward updates during backward
// (without clipping or weight decay, the weights of a plain backward and an SGD step), the optimizer has no step
// of its own, a bad learning rate is named.
#if NUNIT
using System.Linq;
using Accel;
using NUnit.Framework;

namespace Accel.Tests
{
    [TestFixture]
    public class LomoTest
    {
        const string Mlp = "{\"type\": \"mlp\", \"widths\": [3, 4, 2]}";

        // One step of `optimizer` (by LomoBackward, or Backward + Step), then its first parameter.
        static float[] FirstWeightAfterStep(string optimizer, bool lomo)
        {
            Library.SetSeed(7);
            using (var acc = new Accelerator())
            using (var model = Model.FromJson(Mlp))
            using (var opt = new Optimizer(model, optimizer))
            {
                acc.Prepare(model, opt, null, null);
                using (var x = Tensor.Of(new float[] { 0.5f, -1f, 2f, 1.5f, 0.25f, -0.75f }, 2, 3))
                using (var y = Tensor.Of(new float[] { 1f, -1f, 0f, 2f }, 2, 2))
                using (var output = model.Forward(x))
                using (var loss = Library.ComputeLoss("mse", output, y))
                {
                    if (lomo)
                    {
                        acc.LomoBackward(loss, 0.1);
                        var e = Assert.Throws<FailedPreconditionError>(() => opt.Step());
                        StringAssert.Contains("lomo_backward", e.Message);
                    }
                    else
                    {
                        acc.Backward(loss);
                        opt.Step();
                    }
                }
                using (var w = model.GetTensor(model.ParameterName(0)))
                    return w.ToFloatArray();
            }
        }

        [Test]
        public void LomoEqualsSgd()
        {
            float[] want = FirstWeightAfterStep("{\"type\": \"sgd\", \"lr\": 0.1}", false);
            float[] before;
            Library.SetSeed(7);
            using (var fresh = Model.FromJson(Mlp))
            using (var w = fresh.GetTensor(fresh.ParameterName(0)))
                before = w.ToFloatArray();
            float[] got = FirstWeightAfterStep("{\"type\": \"lomo\"}", true);
            Assert.AreEqual(want.Length, got.Length);
            for (int i = 0; i < got.Length; ++i)
                Assert.AreEqual(want[i], got[i], 1e-6f);
            Assert.IsFalse(got.SequenceEqual(before), "LomoBackward left the weights as they were");
        }

        [Test]
        public void BadLearningRateIsNamed()
        {
            using (var acc = new Accelerator())
            using (var model = Model.FromJson(Mlp))
            using (var opt = new Optimizer(model, "{\"type\": \"lomo\"}"))
            {
                acc.Prepare(model, opt, null, null);
                using (var x = Tensor.Of(new float[] { 0.5f, -1f, 2f }, 1, 3))
                using (var y = Tensor.Of(new float[] { 1f, 0f }, 1, 2))
                using (var output = model.Forward(x))
                using (var loss = Library.ComputeLoss("mse", output, y))
                {
                    var e = Assert.Throws<InvalidArgumentError>(() => acc.LomoBackward(loss, double.NaN));
                    StringAssert.Contains("learning_rate", e.Message);
                }
            }
        }
    }
}
#endif
