import HTTPWire

/// Metalink/HTTP (RFC 6249) read from the first source's response, as rules on its head alone (no I/O):
/// `Link: <…>; rel=duplicate` targets become mirrors, and a `Digest` (RFC 3230) or `Repr-Digest` (RFC 9530)
/// of the whole file becomes the whole-file checksum when the request has none (docs/MIRRORS.md). Rules of the
/// decisions module: the download machine takes the digest header's checksum from them.
package enum RFC6249 {
    /// The `rel=duplicate` targets of `headers` to add as mirrors, best first (``LinkHeader/duplicates``), at
    /// most `limit`: absolute `http`/`https` URLs without userinfo (a link cannot smuggle credentials in), not
    /// the first URL nor a mirror already given. Relative targets and other schemes are ignored, and so is
    /// a `Link` field that does not parse.
    package static func mirrors(in headers: DKHTTPHeaders, first: HTTPURL, known: [HTTPURL], limit: Int) -> [HTTPURL] {
        let fields = headers["Link"]
        guard limit > 0, !fields.isEmpty, let links = try? LinkHeader(parsing: fields.joined(separator: ", ")) else { return [] }
        var seen = Set(([first] + known).map(\.absoluteString))
        var mirrors: [HTTPURL] = []
        for link in links.duplicates where mirrors.count < limit {
            let scheme = link.url.prefix { $0 != ":" }.lowercased()
            guard scheme == "http" || scheme == "https", let url = try? HTTPURL(link.url), url.user == nil,
                seen.insert(url.absoluteString).inserted
            else { continue }
            mirrors.append(url)
        }
        return mirrors
    }

    /// The whole-file checksum a response head states, when it is of the whole file (a 200, or a 206 of bytes
    /// `0-(total-1)`): the strongest digest of `Repr-Digest`, else of `Digest`, among the algorithms the
    /// engine computes. nil otherwise (a part of the file, no digest, a field that does not parse).
    package static func checksum(in head: ResponseHead, total: Int64) -> Checksum? {
        if head.status == 206 {
            guard let text = head.headers.first(name: "Content-Range"),
                case .satisfied(let first, let last, let length)? = try? ContentRange(parsing: text),
                first == 0, last == total - 1, length == total
            else { return nil }
        } else if head.status != 200 {
            return nil
        }
        func strongest(_ digests: [HashDigest]) -> Checksum? {
            let supported = digests.compactMap { digest -> (HashDigest, DigestAlgorithm)? in
                DigestAlgorithm(rawValue: digest.algorithm.compactName).map { (digest, $0) }
            }
            return supported.max { $0.0.algorithm < $1.0.algorithm }.map { Checksum(algorithm: $0.1, expectedHex: $0.0.hex) }
        }
        let repr = head.headers["Repr-Digest"]
        if !repr.isEmpty, let field = try? IntegrityDigestHeader(parsing: repr.joined(separator: ", ")), let checksum = strongest(field.digests) {
            return checksum
        }
        let digest = head.headers["Digest"]
        if !digest.isEmpty, let field = try? DigestHeader(parsing: digest.joined(separator: ", ")) { return strongest(field.digests) }
        return nil
    }
}
