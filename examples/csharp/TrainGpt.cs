// Train a character-level GPT on Debian's licence texts through accel's C# bindings (Mono).
//
//   mcs -r:Accel.dll TrainGpt.cs && mono TrainGpt.exe [--steps N] [--eval-every N] [--max-val-loss X]
//       [--save DIR] [--save-every N] [--stop-at N] [--resume DIR/step_N] [--text-dir DIR] [--config JSON]
//
// The same program as examples/c/train_gpt.c (same text, vocabulary, split, model, optimizer, schedule, data
// order and seeds, so it prints the same losses): a 4-layer GPT-2 ({"type": "gpt"}) trained on windows of
// 128 characters (DataLoader.FromTokens) with the "causal_lm" loss, periodic validation, SaveState / resume
// from a folder named step_<N>, and generated text at the end (Model.Generate). Exits non-zero if the final
// validation loss is above --max-val-loss. Lines are printed with Accelerator.Print (the main process only,
// through the library's stdout, so they keep their order with the library's own output); there is no
// progress bar. Works unchanged under `accel launch -n 2 mono TrainGpt.exe`.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Text.RegularExpressions;
using Accel;

static class TrainGpt
{
    const int Block = 128, BatchSize = 16, EvalBatch = 32;
    static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    // Command-line options, with the C example's defaults.
    sealed class Options
    {
        public long Steps = 600, EvalEvery = 100, SaveEvery = 0, StopAt = 0;
        public double MaxValLoss = 2.35; // measured 2.221 (600 steps)
        public string Save, Resume, Config, TextDir = "/usr/share/common-licenses";

        public static Options Parse(string[] args)
        {
            var o = new Options();
            for (int i = 0; i < args.Length; i += 2) {
                if (i + 1 >= args.Length)
                    throw new ArgumentException("incomplete argument " + args[i]);
                string v = args[i + 1];
                switch (args[i]) {
                case "--steps": o.Steps = long.Parse(v, Inv); break;
                case "--eval-every": o.EvalEvery = long.Parse(v, Inv); break;
                case "--max-val-loss": o.MaxValLoss = double.Parse(v, Inv); break;
                case "--save": o.Save = v; break;
                case "--save-every": o.SaveEvery = long.Parse(v, Inv); break;
                case "--stop-at": o.StopAt = long.Parse(v, Inv); break;
                case "--resume": o.Resume = v; break;
                case "--text-dir": o.TextDir = v; break;
                case "--config": o.Config = v; break;
                default: throw new ArgumentException("unknown argument " + args[i] + " (see the comment at the top of TrainGpt.cs)");
                }
            }
            if (o.Steps < 1 || o.EvalEvery < 1 || o.SaveEvery < 0 || o.StopAt < 0)
                throw new ArgumentException("--steps and --eval-every must be >= 1, --save-every and --stop-at >= 0");
            return o;
        }
    }

    // Every regular file of the folder (symbolic links and dot files skipped), in name order (ordinal, as C's
    // strcmp), concatenated.
    static byte[] ReadTexts(string folder)
    {
        var text = new MemoryStream();
        var files = new DirectoryInfo(folder).GetFiles()
            .Where(f => !f.Name.StartsWith(".") && (f.Attributes & FileAttributes.ReparsePoint) == 0)
            .OrderBy(f => f.Name, StringComparer.Ordinal);
        foreach (var f in files) {
            var bytes = File.ReadAllBytes(f.FullName);
            text.Write(bytes, 0, bytes.Length);
        }
        return text.ToArray();
    }

    // Mean causal_lm loss over every window of the split (stride Block).
    static double Evaluate(Model model, Tensor tokens)
    {
        model.Eval();
        double sum = 0.0;
        long count = 0;
        using (var dl = DataLoader.FromTokens(tokens, string.Format(Inv, "{{\"block_size\": {0}, \"batch_size\": {1}}}", Block, EvalBatch))) {
            foreach (var batch in dl)
                using (batch)
                using (var x = batch.Inputs())
                using (var y = batch.Labels())
                using (var logits = model.ForwardNoGrad(x))
                using (var loss = Library.ComputeLoss("causal_lm", logits, y)) {
                    sum += loss.Item() * batch.Size();
                    count += batch.Size();
                }
        }
        model.Train();
        return sum / Math.Max(count, 1);
    }

    // Prints the prompt continued by the model, token ids mapped back to characters through chars.
    static void Sample(Accelerator acc, Model model, byte[] chars, int[] indexOf, string prompt, string options, string title)
    {
        long[] ids = prompt.Select(c => (long)indexOf[(byte)c]).ToArray();
        using (var input = Tensor.Of(ids, ids.Length))
        using (var output = model.Generate(input, options)) {
            string text = new string(output.ToLongArray().Select(t => (char)chars[t]).ToArray()); // bytes as Latin-1
            acc.Print("--- " + title + " ---\n" + text);
        }
    }

    static double CpuSeconds() { return Process.GetCurrentProcess().TotalProcessorTime.TotalSeconds; }

    static int Run(Options o)
    {
        byte[] text = ReadTexts(o.TextDir);
        if (text.Length < 20 * (Block + 1))
            throw new IOException("not enough text in " + o.TextDir);
        // Characters: the distinct bytes of the text, in byte order.
        var indexOf = Enumerable.Repeat(-1, 256).ToArray();
        foreach (byte b in text)
            indexOf[b] = 0;
        var chars = new byte[256];
        int vocab = 0;
        for (int c = 0; c < 256; ++c)
            if (indexOf[c] == 0) {
                chars[vocab] = (byte)c;
                indexOf[c] = vocab++;
            }
        long[] stream = text.Select(b => (long)indexOf[b]).ToArray();
        int nTrain = stream.Length - stream.Length / 10;

        Library.SetSeed(1337);
        double valLoss = -1.0;
        using (var trainTokens = Tensor.Of(stream.Take(nTrain).ToArray(), nTrain))
        using (var valTokens = Tensor.Of(stream.Skip(nTrain).ToArray(), stream.Length - nTrain))
        using (var acc = new Accelerator(o.Config))
        using (var model = Model.FromJson(string.Format(Inv,
                   "{{\"type\": \"gpt\", \"vocab_size\": {0}, \"n_positions\": {1}, \"n_embd\": 128, \"n_layer\": 4, \"n_head\": 4," +
                   " \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0}}", vocab, Block)))
        using (var opt = new Optimizer(model, "{\"type\": \"adamw\", \"lr\": 0.003, \"weight_decay\": 0.01}"))
        using (var sched = new Scheduler(opt, string.Format(Inv,
                   "{{\"type\": \"cosine\", \"num_warmup_steps\": {0}, \"num_training_steps\": {1}}}", o.Steps / 20, o.Steps)))
        using (var train = DataLoader.FromTokens(trainTokens, string.Format(Inv,
                   "{{\"block_size\": {0}, \"stride\": {1}, \"batch_size\": {2}, \"shuffle\": true, \"seed\": 7, \"drop_last\": true}}",
                   Block, Block / 2, BatchSize))) {
            acc.Prepare(model, opt, train, sched);
            long step = 0;
            if (o.Resume != null) {
                var m = Regex.Match(Path.GetFileName(o.Resume.TrimEnd('/')), "^step_([0-9]+)$");
                if (!m.Success)
                    throw new ArgumentException("--resume expects a folder named step_<N> written by --save, got " + o.Resume);
                step = long.Parse(m.Groups[1].Value, Inv);
                acc.LoadState(o.Resume);
            }
            acc.Print(string.Format(Inv, "data: {0} characters (vocabulary {1}), {2} training steps, {3} step {4}",
                text.Length, vocab, o.Steps, o.Resume != null ? "resumed at" : "from", step));

            long stop = o.StopAt > 0 && o.StopAt < o.Steps ? o.StopAt : o.Steps;
            // Trackers of the config's "log_with" get every step's loss and learning rate (nothing without log_with).
            acc.InitTrackers("train_gpt", string.Format(Inv, "{{\"steps\": {0}, \"block_size\": {1}, \"batch_size\": {2}}}",
                o.Steps, Block, BatchSize));
            double started = CpuSeconds(), lossSum = 0.0;
            long lossCount = 0;
            string stateDir = null;
            while (step < stop) {
                var batch = train.NextBatch();
                if (batch == null)
                    continue; // end of a pass: the next call starts the next one
                double loss;
                using (batch)
                    loss = acc.TrainStep(model, opt, sched, batch, "causal_lm");
                ++step;
                lossSum += loss;
                ++lossCount;
                acc.Log("{\"loss\": " + loss.ToString("R", Inv) + ", \"lr\": " + sched.GetLastLr().ToString("R", Inv) + "}", step);
                if (step % o.EvalEvery == 0 || step == o.Steps) {
                    valLoss = Evaluate(model, valTokens);
                    acc.Print(string.Format(Inv, "step {0,5}  train loss {1:F4}  val loss {2:F4}  ({3:F0} s CPU)", step,
                        lossSum / lossCount, valLoss, CpuSeconds() - started));
                    lossSum = 0.0;
                    lossCount = 0;
                }
                if (o.Save != null && ((o.SaveEvery > 0 && step % o.SaveEvery == 0) || step == o.Steps || step == o.StopAt)) {
                    stateDir = Path.Combine(o.Save, "step_" + step.ToString(Inv));
                    acc.SaveState(stateDir);
                }
            }
            acc.EndTraining();
            if (step < o.Steps) {
                acc.Print("stopped at step " + step + " of " + o.Steps + (stateDir != null ? "; continue with --resume " + stateDir : ""));
                return 0;
            }
            if (valLoss < 0.0) // resumed at the end: nothing trained
                valLoss = Evaluate(model, valTokens);
            Sample(acc, model, chars, indexOf, "This program is free software", "{\"max_new_tokens\": 90}", "greedy");
            Sample(acc, model, chars, indexOf, "Permission ",
                "{\"max_new_tokens\": 110, \"do_sample\": true, \"top_k\": 10, \"temperature\": 0.8, \"seed\": 42}",
                "top-k 10, temperature 0.8, seed 42");
            acc.Print(string.Format(Inv, "final loss {0:F8} (validation; required <= {1:F4})", valLoss, o.MaxValLoss));
        }
        return valLoss <= o.MaxValLoss ? 0 : 1;
    }

    static int Main(string[] args)
    {
        try {
            return Run(Options.Parse(args));
        } catch (AccelError e) {
            Console.Error.WriteLine("TrainGpt: " + e.StatusName + ": " + e.Message);
            return 1;
        } catch (Exception e) when (e is ArgumentException || e is IOException || e is FormatException) {
            Console.Error.WriteLine("TrainGpt: " + e.Message);
            return 2;
        }
    }
}
