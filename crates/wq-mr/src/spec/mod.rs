//! The submission schema, its validation into an [`MrSpec`]-like domain
//! value, and the content hash.
