import HTTPWire

/// The one rule set for answers to a range request: the single-connection engine, the
/// segmented transfer's probe and its workers all ask it, so a rule about a 206, a 200 or a 416 exists
/// once. A pure value: the request's facts in, a decision out — no socket, no file (tested as a table in
/// `RangeResponsePolicyTests`).
///
/// The rules (docs/ENGINE.md, "One attempt"):
/// - 206: Content-Range must be a valid satisfied range starting at the first byte asked for; its total
///   must equal the known total (else the length changed); a Content-Length must equal the range's
///   length (more would be written as the following bytes, none would be asked for again without end);
///   an ETag different from the known one means another version. Tags compare strongly, or weakly when
///   either is weak (the `If-Range` that let the 206 through was then Last-Modified, RFC 9110 §13.1.5).
/// - 200: the server sent the whole resource: it changed (a different validator) or it ignored the range.
/// - 416 with `*/N`: N larger than the first byte asked for contradicts the refusal (the server's
///   mistake: retried, the partial kept); N smaller means the partial is longer than the resource; N equal
///   means the partial is complete — if the length and validator still agree. A 416 without `*/N` for a
///   range past byte 0 means the partial is longer than the resource.
package struct RangeResponsePolicy: Sendable, Hashable {
    /// The first byte asked for (`bytes=first-` or `bytes=first-last`).
    package var first: Int64
    /// The validator known before the request, from the resume info, the probe or an earlier response.
    package var knownEntityTag: EntityTag?
    /// The `Last-Modified` known before the request.
    package var knownLastModified: String?
    /// The resource's length known before the request.
    package var knownTotal: Int64?

    package init(first: Int64, knownEntityTag: EntityTag?, knownLastModified: String?, knownTotal: Int64?) {
        self.first = first
        self.knownEntityTag = knownEntityTag
        self.knownLastModified = knownLastModified
        self.knownTotal = knownTotal
    }

    /// What a response means for the partial data.
    package enum Decision: Sendable, Hashable {
        /// Write the body at `first`: it holds bytes `first...last` of a resource of `total` bytes (nil
        /// when the server did not say).
        case write(first: Int64, last: Int64, total: Int64?)
        /// The body is the whole resource (200): the resource changed or the server ignored the range. One
        /// connection can write it from byte 0; a segment cannot use it.
        case wholeBody(RestartReason)
        /// The partial already holds the whole resource of `total` bytes.
        case complete(total: Int64)
        /// The partial belongs to another version or length: discard it and start over.
        case restart(RestartReason)
        /// A wrong answer a retry may fix (transient); the partial is kept. `detail` names the fault.
        case retry(detail: String)
        /// Not an answer to the range (a redirect, an error status): the caller's status rules apply.
        case other
    }

    /// Decides what `head`, the answer to a range request, means.
    package func decide(_ head: ResponseHead) -> Decision {
        let receivedTag = head.headers.first(name: "ETag").flatMap { try? EntityTag(parsing: $0) }
        switch head.status {
        case 206:
            guard let text = head.headers.first(name: "Content-Range"), let range = try? ContentRange(parsing: text),
                case .satisfied(let start, let last, let total) = range
            else {
                return .retry(detail: "a 206 without a valid Content-Range")
            }
            if let receivedTag, Self.entityTagChanged(known: knownEntityTag, received: receivedTag) {
                return .restart(.validatorChanged)
            }
            if let total, let knownTotal, total != knownTotal { return .restart(.lengthChanged) }
            guard start == first else {
                return .retry(detail: "range mismatch: asked for bytes from \(first), the server sent \(text)")
            }
            if let length = try? head.contentLength(), length != last - start + 1 {
                return .retry(detail: "the 206 body is \(length) bytes but its Content-Range \(text) names \(last - start + 1)")
            }
            return .write(first: start, last: last, total: total)

        case 200:
            return .wholeBody(validatorChanged(receivedTag, head) ? .validatorChanged : .rangeIgnored)

        case 416:
            let unsatisfied = head.headers.first(name: "Content-Range").flatMap { try? ContentRange(parsing: $0) }
            guard case .unsatisfied(let total)? = unsatisfied else {
                return first > 0 ? .restart(.partialLongerThanResource) : .other
            }
            if total > first {
                return .retry(detail: "416 for bytes from \(first) although the server gives the length as \(total)")
            }
            if total < first { return .restart(.partialLongerThanResource) }
            if let knownTotal, knownTotal != total { return .restart(.lengthChanged) }
            if let receivedTag, Self.entityTagChanged(known: knownEntityTag, received: receivedTag) {
                return .restart(.validatorChanged)
            }
            return first > 0 ? .complete(total: total) : .other

        default:
            return .other
        }
    }

    /// Whether a 200's validators differ from the known ones (else the server ignored the range).
    private func validatorChanged(_ receivedTag: EntityTag?, _ head: ResponseHead) -> Bool {
        if let knownEntityTag {
            guard let receivedTag else { return true }
            return Self.entityTagChanged(known: knownEntityTag, received: receivedTag)
        }
        if let knownLastModified { return head.headers.first(name: "Last-Modified") != knownLastModified }
        return false
    }

    /// Whether a response's ETag says the resource changed. Two strong tags compare strongly; when either
    /// is weak (RFC 9110 §8.8.3.2) only the opaque tags are compared — the byte identity is then proved by
    /// `If-Range` with Last-Modified. No known tag: nothing to contradict.
    package static func entityTagChanged(known: EntityTag?, received: EntityTag) -> Bool {
        guard let known else { return false }
        if known.isWeak || received.isWeak { return !known.weakMatches(received) }
        return !known.strongMatches(received)
    }
}
