// Trace's methods are [Conditional("TRACE")]: defined here so the calls stay whatever the build defines.
#define TRACE
using System.Diagnostics;

namespace Accel
{
    /// <summary>Routes libaccel's messages (its own warnings included, and <c>Library.LogWrite</c>'s) to
    /// System.Diagnostics.Trace as "name: message" (ERROR and CRITICAL: TraceError, WARNING: TraceWarning, INFO:
    /// TraceInformation, DEBUG: WriteLine with the name as category). Call <see cref="Install"/> once, before the
    /// first Accelerator; an ILogger can listen through a TraceListener.</summary>
    public static class AccelLogging
    {
        sealed class TraceCallback : LogCallback
        {
            readonly bool several = Library.ProcessCount() > 1;
            public override void OnMessage(int level, string name, int processIndex, string message)
            {
                string text = (several ? "[rank" + processIndex + "] " : "") + name + ": " + message;
                if (level >= 40) Trace.TraceError(text);
                else if (level >= 30) Trace.TraceWarning(text);
                else if (level >= 20) Trace.TraceInformation(text);
                else Trace.WriteLine(text, name);
            }
        }

        // The library keeps only a pointer to the callback: this reference keeps it alive while installed.
        static LogCallback installed;
        static readonly object gate = new object();

        /// <summary>Send every message to Trace.</summary>
        public static void Install()
        {
            lock (gate) {
                var callback = new TraceCallback();
                Library.LogSetCallback(callback);
                installed = callback;
            }
        }

        /// <summary>Back to standard error.</summary>
        public static void Uninstall()
        {
            lock (gate) {
                Library.LogSetCallback(null);
                installed = null;
            }
        }
    }
}
