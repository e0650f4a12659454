/* typemaps/buffers.i - byte buffers, typed arrays and shapes.
 *
 * Argument-name patterns used by accel.i (the C functions keep their own `pointer + size_t` pairs):
 *   (const void *IN_BYTES, size_t IN_NBYTES)   bytes in:  Python buffer protocol (bytes, bytearray,
 *                                              memoryview, array.array, numpy), Java direct ByteBuffer
 *                                              (position..limit), C# byte[] (+ explicit count)
 *   (void *OUT_BYTES, size_t OUT_NBYTES)       bytes out: writable buffer / direct ByteBuffer / byte[]
 *   (const int64_t *IN_SHAPE, size_t IN_NDIM)  a shape:   Python sequence of ints, Java long[], C# long[]
 *   (const T *IN_ARRAY, size_t IN_COUNT)       typed arrays in  (Java, C#: float[], double[], int[], long[],
 *   (T *OUT_ARRAY, size_t OUT_COUNT)           typed arrays out  byte[]); Python uses buffers instead
 * Java and Python fold each pair into one argument. SWIG's C# module has no multi-argument typemaps,
 * so C# keeps the count as an argument of the internal method and the public C# methods
 * (csharp/accel_csharp.i) pass array.Length. */

/* ---------------------------------------------------------------------------------------------------- */
#if defined(SWIGPYTHON)

%typemap(in) (const void *IN_BYTES, size_t IN_NBYTES) (Py_buffer view = {}) {
  if (PyObject_GetBuffer($input, &view, PyBUF_C_CONTIGUOUS) != 0)
    SWIG_fail;
  $1 = view.buf;
  $2 = (size_t)view.len;
}
%typemap(freearg) (const void *IN_BYTES, size_t IN_NBYTES) {
  if (view$argnum.obj)
    PyBuffer_Release(&view$argnum);
}
%typemap(in) (void *OUT_BYTES, size_t OUT_NBYTES) (Py_buffer view = {}) {
  if (PyObject_GetBuffer($input, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0)
    SWIG_fail;
  $1 = view.buf;
  $2 = (size_t)view.len;
}
%typemap(freearg) (void *OUT_BYTES, size_t OUT_NBYTES) {
  if (view$argnum.obj)
    PyBuffer_Release(&view$argnum);
}
%typemap(in) (const int64_t *IN_SHAPE, size_t IN_NDIM) (std::vector<int64_t> dims) {
  PyObject *seq = PySequence_Fast($input, "shape: expected a sequence of integers");
  if (!seq)
    SWIG_fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    long long d = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (d == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      SWIG_fail;
    }
    dims.push_back((int64_t)d);
  }
  Py_DECREF(seq);
  $1 = dims.empty() ? NULL : dims.data();
  $2 = dims.size();
}
%typemap(typecheck) (const int64_t *IN_SHAPE, size_t IN_NDIM) { $1 = PySequence_Check($input); }
%{
#include <vector>
%}

/* ---------------------------------------------------------------------------------------------------- */
#elif defined(SWIGJAVA)

%define ACCEL_JAVA_ARRAY(CTYPE, JNIARR, JNIELEM, JTYPE, JFN)
%typemap(jni) (const CTYPE *IN_ARRAY, size_t IN_COUNT), (CTYPE *OUT_ARRAY, size_t OUT_COUNT) "JNIARR"
%typemap(jtype) (const CTYPE *IN_ARRAY, size_t IN_COUNT), (CTYPE *OUT_ARRAY, size_t OUT_COUNT) "JTYPE[]"
%typemap(jstype) (const CTYPE *IN_ARRAY, size_t IN_COUNT), (CTYPE *OUT_ARRAY, size_t OUT_COUNT) "JTYPE[]"
%typemap(javain) (const CTYPE *IN_ARRAY, size_t IN_COUNT), (CTYPE *OUT_ARRAY, size_t OUT_COUNT) "$javainput"
%typemap(in) (const CTYPE *IN_ARRAY, size_t IN_COUNT), (CTYPE *OUT_ARRAY, size_t OUT_COUNT) {
  if (!$input) {
    SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "array must not be null");
    return $null;
  }
  $2 = (size_t)JCALL1(GetArrayLength, jenv, $input);
  $1 = (CTYPE *)JCALL2(Get##JFN##ArrayElements, jenv, $input, 0);
}
/* Inputs are released without copying back; outputs are copied back into the Java array. */
%typemap(freearg) (const CTYPE *IN_ARRAY, size_t IN_COUNT) {
  if ($1)
    JCALL3(Release##JFN##ArrayElements, jenv, $input, (JNIELEM *)$1, JNI_ABORT);
}
%typemap(freearg) (CTYPE *OUT_ARRAY, size_t OUT_COUNT) {
  if ($1)
    JCALL3(Release##JFN##ArrayElements, jenv, $input, (JNIELEM *)$1, 0);
}
%enddef

ACCEL_JAVA_ARRAY(float, jfloatArray, jfloat, float, Float)
ACCEL_JAVA_ARRAY(double, jdoubleArray, jdouble, double, Double)
ACCEL_JAVA_ARRAY(int32_t, jintArray, jint, int, Int)
ACCEL_JAVA_ARRAY(int64_t, jlongArray, jlong, long, Long)
ACCEL_JAVA_ARRAY(uint8_t, jbyteArray, jbyte, byte, Byte)

/* A shape: long[]; null means a scalar (no dimensions). */
%typemap(jni) (const int64_t *IN_SHAPE, size_t IN_NDIM) "jlongArray"
%typemap(jtype) (const int64_t *IN_SHAPE, size_t IN_NDIM) "long[]"
%typemap(jstype) (const int64_t *IN_SHAPE, size_t IN_NDIM) "long[]"
%typemap(javain) (const int64_t *IN_SHAPE, size_t IN_NDIM) "$javainput"
%typemap(in) (const int64_t *IN_SHAPE, size_t IN_NDIM) {
  $1 = $input ? (int64_t *)JCALL2(GetLongArrayElements, jenv, $input, 0) : NULL;
  $2 = $input ? (size_t)JCALL1(GetArrayLength, jenv, $input) : 0;
}
%typemap(freearg) (const int64_t *IN_SHAPE, size_t IN_NDIM) {
  if ($1)
    JCALL3(ReleaseLongArrayElements, jenv, $input, (jlong *)$1, JNI_ABORT);
}

/* Direct ByteBuffers: the bytes between position and limit (slice()), without copying on the Java side. */
%typemap(jni) (const void *IN_BYTES, size_t IN_NBYTES), (void *OUT_BYTES, size_t OUT_NBYTES) "jobject"
%typemap(jtype) (const void *IN_BYTES, size_t IN_NBYTES), (void *OUT_BYTES, size_t OUT_NBYTES) "java.nio.ByteBuffer"
%typemap(jstype) (const void *IN_BYTES, size_t IN_NBYTES), (void *OUT_BYTES, size_t OUT_NBYTES) "java.nio.ByteBuffer"
%typemap(javain) (const void *IN_BYTES, size_t IN_NBYTES), (void *OUT_BYTES, size_t OUT_NBYTES) "$javainput.slice()"
%typemap(in) (const void *IN_BYTES, size_t IN_NBYTES), (void *OUT_BYTES, size_t OUT_NBYTES) {
  $1 = JCALL1(GetDirectBufferAddress, jenv, $input);
  if (!$1) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                            "buffer: expected a direct ByteBuffer (ByteBuffer.allocateDirect)");
    return $null;
  }
  $2 = (size_t)JCALL1(GetDirectBufferCapacity, jenv, $input);
}

/* ---------------------------------------------------------------------------------------------------- */
#elif defined(SWIGCSHARP)

%define ACCEL_CSHARP_ARRAY(CTYPE, CSTYPE)
%typemap(ctype) const CTYPE *IN_ARRAY "CTYPE *"
%typemap(imtype, inattributes="[global::System.Runtime.InteropServices.In]") const CTYPE *IN_ARRAY "CSTYPE[]"
%typemap(cstype) const CTYPE *IN_ARRAY "CSTYPE[]"
%typemap(csin) const CTYPE *IN_ARRAY "$csinput"
%typemap(in) const CTYPE *IN_ARRAY %{ $1 = $input; %}
%typemap(ctype) CTYPE *OUT_ARRAY "CTYPE *"
%typemap(imtype, inattributes="[global::System.Runtime.InteropServices.In, global::System.Runtime.InteropServices.Out]") CTYPE *OUT_ARRAY "CSTYPE[]"
%typemap(cstype) CTYPE *OUT_ARRAY "CSTYPE[]"
%typemap(csin) CTYPE *OUT_ARRAY "$csinput"
%typemap(in) CTYPE *OUT_ARRAY %{ $1 = $input; %}
%enddef

ACCEL_CSHARP_ARRAY(float, float)
ACCEL_CSHARP_ARRAY(double, double)
ACCEL_CSHARP_ARRAY(int32_t, int)
ACCEL_CSHARP_ARRAY(int64_t, long)
ACCEL_CSHARP_ARRAY(uint8_t, byte)

%typemap(ctype) const int64_t *IN_SHAPE "int64_t *"
%typemap(imtype, inattributes="[global::System.Runtime.InteropServices.In]") const int64_t *IN_SHAPE "long[]"
%typemap(cstype) const int64_t *IN_SHAPE "long[]"
%typemap(csin) const int64_t *IN_SHAPE "$csinput"
%typemap(in) const int64_t *IN_SHAPE %{ $1 = $input; %}

%typemap(ctype) const void *IN_BYTES "void *"
%typemap(imtype, inattributes="[global::System.Runtime.InteropServices.In]") const void *IN_BYTES "byte[]"
%typemap(cstype) const void *IN_BYTES "byte[]"
%typemap(csin) const void *IN_BYTES "$csinput"
%typemap(in) const void *IN_BYTES %{ $1 = $input; %}
%typemap(ctype) void *OUT_BYTES "void *"
%typemap(imtype, inattributes="[global::System.Runtime.InteropServices.In, global::System.Runtime.InteropServices.Out]") void *OUT_BYTES "byte[]"
%typemap(cstype) void *OUT_BYTES "byte[]"
%typemap(csin) void *OUT_BYTES "$csinput"
%typemap(in) void *OUT_BYTES %{ $1 = $input; %}

/* Counts travel as 64-bit values (SWIG's default maps size_t to a 32-bit uint). */
%apply unsigned long long { size_t IN_COUNT, size_t OUT_COUNT, size_t IN_NDIM, size_t IN_NBYTES, size_t OUT_NBYTES };

#endif
