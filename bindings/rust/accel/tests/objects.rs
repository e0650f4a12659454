//! Object collectives in one process (the multi-process checks are tests/distributed/dist_objects.c): bytes and
//! JSON come back as sent, bad input is an error naming the argument.
use accel::{Accelerator, Status};

#[test]
fn object_collectives_single_process() -> accel::Result<()> {
    let mut acc = Accelerator::new(None)?;
    assert_eq!(acc.gather_object(b"a\0b")?, vec![b"a\0b".to_vec()]);
    assert_eq!(acc.gather_object(&[])?, vec![Vec::<u8>::new()]);
    let list: [&[u8]; 3] = [b"alpha", b"", &[1, 2]];
    assert_eq!(acc.broadcast_object_list(&list, 0)?, vec![b"alpha".to_vec(), vec![], vec![1, 2]]);
    assert!(acc.broadcast_object_list::<&[u8]>(&[], 0)?.is_empty());
    assert_eq!(acc.broadcast_object(b"xyz", 0)?, b"xyz".to_vec());
    assert_eq!(acc.gather_object_json(r#"[1, {"a": 2}]"#)?, r#"[1, {"a": 2}]"#);
    assert_eq!(acc.broadcast_object_json(Some(r#"{"k": [true]}"#), 0)?, r#"{"k": [true]}"#);

    let err = acc.gather_object_json(r#"{"a": 1}"#).err().expect("an error");
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("expected a JSON array"), "{err}");
    let err = acc.broadcast_object_json(None, 0).err().expect("an error");
    assert_eq!(err.status(), Status::InvalidArgument);
    let err = acc.broadcast_object(b"x", 1).err().expect("an error");
    assert_eq!(err.status(), Status::OutOfRange);
    Ok(())
}
