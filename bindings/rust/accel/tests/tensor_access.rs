//! The typed accessors' rule (docs/guides/bindings/index.md): `Tensor::to_vec::<T>()` converts where every value of the
//! tensor's dtype is exact in `T`, and is `Status::InvalidArgument` naming both dtypes otherwise.
use accel::{dtype, Status, Tensor};

/// Written out independently of `converts_exactly`: source dtype -> the element types that take it exactly.
fn exact(from: i32) -> &'static [i32] {
    use dtype::*;
    match from {
        FLOAT32 => &[FLOAT32, FLOAT64],
        FLOAT64 => &[FLOAT64],
        FLOAT16 | BFLOAT16 => &[FLOAT32, FLOAT64],
        INT8 | INT16 => &[FLOAT32, FLOAT64, INT32, INT64],
        UINT8 | BOOL => &[FLOAT32, FLOAT64, INT32, INT64, UINT8],
        INT32 => &[FLOAT64, INT32, INT64],
        INT64 => &[INT64],
        _ => unreachable!(),
    }
}

/// Four values the dtype holds exactly.
fn values(from: i32) -> [f64; 4] {
    use dtype::*;
    match from {
        FLOAT64 => [1.5, -2.25, 0.0, 1e300],
        FLOAT32 | FLOAT16 | BFLOAT16 => [1.5, -2.25, 0.0, 3.0],
        INT8 => [1.0, -128.0, 0.0, 127.0],
        UINT8 => [1.0, 255.0, 0.0, 3.0],
        INT16 => [300.0, -32768.0, 0.0, 3.0],
        INT32 => [100000.0, -2147483648.0, 0.0, 3.0],
        INT64 => [(1i64 << 40) as f64, -2.0, 0.0, 3.0],
        BOOL => [1.0, 0.0, 1.0, 1.0],
        _ => unreachable!(),
    }
}

fn encode(from: i32, x: f64) -> Vec<u8> {
    use dtype::*;
    match from {
        FLOAT32 => (x as f32).to_ne_bytes().to_vec(),
        FLOAT64 => x.to_ne_bytes().to_vec(),
        FLOAT16 => (if x == 1.5 { 0x3E00u16 } else if x == -2.25 { 0xC080 } else if x == 3.0 { 0x4200 } else { 0 })
            .to_ne_bytes()
            .to_vec(),
        BFLOAT16 => (((x as f32).to_bits() >> 16) as u16).to_ne_bytes().to_vec(),
        INT8 | UINT8 | BOOL => vec![x as i64 as u8],
        INT16 => (x as i16).to_ne_bytes().to_vec(),
        INT32 => (x as i32).to_ne_bytes().to_vec(),
        _ => (x as i64).to_ne_bytes().to_vec(),
    }
}

fn read(t: &Tensor, to: i32) -> accel::Result<Vec<f64>> {
    Ok(match to {
        dtype::FLOAT32 => t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
        dtype::FLOAT64 => t.to_vec::<f64>()?,
        dtype::INT32 => t.to_vec::<i32>()?.into_iter().map(f64::from).collect(),
        dtype::INT64 => t.to_vec::<i64>()?.into_iter().map(|v| v as f64).collect(),
        _ => t.to_vec::<u8>()?.into_iter().map(f64::from).collect(),
    })
}

#[test]
fn every_dtype_through_to_vec() -> accel::Result<()> {
    use dtype::*;
    for from in [FLOAT32, FLOAT64, FLOAT16, BFLOAT16, INT8, UINT8, INT16, INT32, INT64, BOOL] {
        let raw: Vec<u8> = values(from).iter().flat_map(|&x| encode(from, x)).collect();
        let t = Tensor::from_bytes(&raw, from, &[4])?;
        assert_eq!(t.dtype()?, from);
        for to in [FLOAT32, FLOAT64, INT32, INT64, UINT8] {
            let what = format!("{} -> {}", dtype::name(from), dtype::name(to));
            if exact(from).contains(&to) {
                assert_eq!(read(&t, to)?, values(from).to_vec(), "{what}");
            } else {
                let e = read(&t, to).expect_err(&what);
                assert_eq!(e.status(), Status::InvalidArgument, "{what}");
                let want = format!("dtype is {}, and {} cannot", dtype::name(from), dtype::name(to));
                assert!(e.message().contains(&want), "{what}: {}", e.message());
            }
        }
    }
    Ok(())
}

#[test]
fn int32_read_as_f32_names_both_dtypes() -> accel::Result<()> {
    let t = Tensor::from_slice(&[1i32, 2, 3, 4], &[4])?;
    let e = t.to_vec::<f32>().unwrap_err();
    assert_eq!(
        e.message(),
        "to_vec: the tensor's dtype is int32, and float32 cannot hold every int32 value exactly; read it as float64, int32, int64"
    );
    assert_eq!(t.to_vec::<f64>()?, vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(t.to_vec::<i64>()?, vec![1, 2, 3, 4]);
    Ok(())
}
