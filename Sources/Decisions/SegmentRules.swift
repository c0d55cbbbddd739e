import HTTPWire

/// Validator rules of segmented transfers (the tag comparison itself is ``RangeResponsePolicy``'s).
package enum SegmentRules {

    /// Why a resource must not be split, or nil: a weak ETag without Last-Modified leaves no validator that
    /// may go in `If-Range` (RFC 9110 §13.1.5), so segments could splice two versions.
    package static func oneConnectionReason(entityTag: EntityTag?, lastModified: String?) -> String? {
        guard let entityTag, entityTag.isWeak, lastModified == nil else { return nil }
        return "the server's only validator is a weak ETag, which cannot protect range requests"
    }
}
