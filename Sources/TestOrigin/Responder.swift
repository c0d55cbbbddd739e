import Foundation
import HTTPWire

/// Writes the response to one request for a ``Resource``: validators, range selection (RFC 9110 §14),
/// `If-Range` (§13.1.5), framing, pacing and the resource's faults.
struct Responder {
    let resource: Resource
    let request: RecordedRequest
    let match: OriginState.Match
    let connection: OriginConnection
    let origin: OriginState
    let keepAlive: Bool

    /// The resource as it is at this request (after any `changeValidatorAfter`).
    private struct Version {
        var seed: UInt64
        var body: [UInt8]?
        var size: Int64
        var etag: String?
        var lastModified: String?
    }

    /// What the `Range` header asks for, after `If-Range` and the resource's range policy.
    enum RangeSelection: Equatable {
        case full
        case part(start: Int64, end: Int64)
        case unsatisfiable
    }

    /// Writes the response.
    /// - Returns: Whether the connection may carry another request.
    func respond() throws -> Bool {
        let version = currentVersion()
        let isHead = request.method == "HEAD"

        for fault in resource.faults {
            if case .statusForRequests(let status, let first, let headers) = fault, match.requestNumber < first {
                var all = headers
                if !keepAlive { all.append(("Connection", "close")) }
                try Self.writeSimple(
                    status: status, headers: all, body: Array("\(status) scripted by FaultOrigin\n".utf8),
                    includeBody: !isHead, on: connection)
                return keepAlive
            }
        }
        guard request.method == "GET" || isHead else {
            try Self.writeSimple(
                status: 405, headers: [("Allow", "GET, HEAD"), ("Connection", "close")], body: [], includeBody: false,
                on: connection)
            return false
        }

        var headers: [(String, String)] = [("Content-Type", resource.contentType)]
        if resource.acceptRanges { headers.append(("Accept-Ranges", "bytes")) }
        if let etag = version.etag { headers.append(("ETag", etag)) }
        if let lastModified = version.lastModified { headers.append(("Last-Modified", lastModified)) }
        if let disposition = resource.contentDisposition { headers.append(("Content-Disposition", disposition)) }
        if let md5 = resource.contentMD5 { headers.append(("Content-MD5", md5)) }
        headers += resource.extraHeaders

        var status = 200
        var start: Int64 = 0
        var length = version.size
        switch selection(version: version) {
        case .full:
            break
        case .unsatisfiable:
            headers.append(("Content-Range", "bytes */\(version.size)"))
            headers.append(("Content-Length", "0"))
            if !keepAlive { headers.append(("Connection", "close")) }
            try writeHead(status: 416, headers: headers)
            return keepAlive
        case .part(let first, let last):
            status = 206
            start = first
            length = last - first + 1
            for fault in resource.faults {
                if case .wrongContentRangeStart(let delta) = fault {
                    start = min(max(0, first + delta), max(0, version.size - 1))
                    length = min(length, version.size - start)
                }
            }
            headers.append(("Content-Range", "bytes \(start)-\(start + length - 1)/\(version.size)"))
        }

        let malformedChunks = resource.faults.contains { if case .malformedChunks = $0 { true } else { false } }
        let chunked = resource.chunked || malformedChunks
        var extra = 0
        for fault in resource.faults {
            if case .bodyLongerThanAnnounced(let count) = fault { extra += count }
        }
        let closesAfter = !keepAlive || malformedChunks || extra > 0
        if chunked {
            headers.append(("Transfer-Encoding", "chunked"))
        } else {
            headers.append(("Content-Length", String(length)))
        }
        if closesAfter { headers.append(("Connection", "close")) }
        try writeHead(status: status, headers: headers)
        if isHead { return keepAlive }

        let plan = truncationPlan()
        let completed = try sendBody(
            version: version, start: start, length: length, chunked: chunked, malformedChunks: malformedChunks,
            plan: plan)
        guard completed else { return false }
        if extra > 0 {
            // Bytes beyond the announced length: the pattern simply continues.
            try connection.writePattern(offset: start + length, count: Int64(extra), seed: version.seed)
            connection.close()
            return false
        }
        return !closesAfter
    }

    // MARK: Version and range selection

    private func currentVersion() -> Version {
        var version = Version(
            seed: resource.seed, body: resource.body, size: resource.effectiveSize, etag: resource.etag,
            lastModified: resource.lastModified)
        for fault in resource.faults {
            if case .changeValidatorAfter(let requests, let newSeed, let newETag, let newLastModified) = fault,
                match.requestNumber >= requests
            {
                version.seed = newSeed
                version.body = nil
                version.etag = newETag
                version.lastModified = newLastModified
            }
        }
        return version
    }

    private func selection(version: Version) -> RangeSelection {
        // RFC 9110 §14.2: range handling is defined for GET only; other methods ignore Range.
        guard request.method == "GET", resource.honorsRanges,
            !resource.faults.contains(where: { if case .ignoreRanges = $0 { true } else { false } }),
            let range = request.header("Range")
        else { return .full }
        if let condition = request.header("If-Range"),
            !Self.ifRangeMatches(condition, etag: version.etag, lastModified: version.lastModified)
        {
            return .full
        }
        return Self.parseRange(range, size: version.size)
    }

    /// RFC 9110 §13.1.5: an entity-tag matches only by strong comparison (neither tag weak); a date
    /// matches only if it is exactly the current `Last-Modified`.
    static func ifRangeMatches(_ condition: String, etag: String?, lastModified: String?) -> Bool {
        let value = condition.trimmingCharacters(in: .whitespaces)
        if value.hasPrefix("\"") || value.hasPrefix("W/") {
            guard let etag, !etag.hasPrefix("W/"), !value.hasPrefix("W/") else { return false }
            return etag == value
        }
        guard let lastModified else { return false }
        return lastModified == value
    }

    /// Parses a `Range` value for a representation of `size` bytes.
    ///
    /// One range (`a-b`, `a-`, `-n`) is served; a syntactically invalid value or a list of several
    /// ranges is ignored (`.full`), which RFC 9110 §14.2 permits.
    static func parseRange(_ value: String, size: Int64) -> RangeSelection {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes=") else { return .full }
        let spec = trimmed.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .full }
        let firstText = spec[..<dash].trimmingCharacters(in: .whitespaces)
        let lastText = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        func number(_ text: String) -> Int64? {
            guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            return Int64(text)
        }
        if firstText.isEmpty {
            guard let suffix = number(lastText) else { return .full }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .part(start: max(0, size - suffix), end: size - 1)
        }
        guard let first = number(firstText) else { return .full }
        if lastText.isEmpty {
            return first < size ? .part(start: first, end: size - 1) : .unsatisfiable
        }
        guard let last = number(lastText), last >= first else { return .full }
        guard first < size else { return .unsatisfiable }
        return .part(start: first, end: min(last, size - 1))
    }

    // MARK: Body

    /// The cuts and pauses the truncating faults impose on this response, in body bytes.
    private struct TruncationPlan {
        var resetAt: Int64?
        var closeAt: Int64?
        var stalls: [(at: Int64, seconds: Double)] = []

        var cut: Int64? {
            switch (resetAt, closeAt) {
            case (let reset?, let close?): min(reset, close)
            case (let reset?, nil): reset
            case (nil, let close?): close
            case (nil, nil): nil
            }
        }
    }

    private func truncationPlan() -> TruncationPlan {
        let number = origin.claimBodyResponse(match)
        var plan = TruncationPlan()
        for fault in resource.faults {
            switch fault {
            case .resetAfter(let bytes, let times) where number < times:
                plan.resetAt = min(plan.resetAt ?? bytes, bytes)
            case .closeAfter(let bytes, let times) where number < times:
                plan.closeAt = min(plan.closeAt ?? bytes, bytes)
            case .stallAfter(let bytes, let seconds, let times) where number < times:
                plan.stalls.append((bytes, seconds))
            default:
                break
            }
        }
        plan.stalls.sort { $0.at < $1.at }
        return plan
    }

    /// Sends `length` body bytes from `start`, applying the plan and the pacing.
    /// - Returns: `true` when the whole body (and its chunked terminator) was sent.
    private func sendBody(
        version: Version, start: Int64, length: Int64, chunked: Bool, malformedChunks: Bool, plan: TruncationPlan
    ) throws -> Bool {
        var sent: Int64 = 0
        var stalls = plan.stalls[...]
        let began = Date()
        // Paced responses go out in slices of about 20 ms of data so the rate is smooth.
        let pacingSlice = resource.bytesPerSecond.map { Int64(max(1, $0 / 50)) }
        // A malformed chunked body: one good chunk of up to 1 KiB, then a bad chunk-size line.
        let bodyEnd = malformedChunks ? min(length, 1024) : length
        while true {
            while let stall = stalls.first, stall.at <= sent {
                stalls = stalls.dropFirst()
                if sent < length { connection.sleep(seconds: stall.seconds) }
            }
            if origin.shuttingDown { throw OriginError("serving", detail: "origin shut down") }
            if let cut = plan.cut, sent >= cut {
                if plan.resetAt == cut { connection.reset() } else { connection.close() }
                return false
            }
            if sent >= bodyEnd { break }
            var slice = min(bodyEnd - sent, Int64(OriginConnection.bodyBufferSize))
            if let pacingSlice { slice = min(slice, pacingSlice) }
            if let cut = plan.cut { slice = min(slice, cut - sent) }
            if let stall = stalls.first { slice = min(slice, stall.at - sent) }
            let window = connection.scratch(Int(slice))
            if let body = version.body {
                body.withUnsafeBytes { source in
                    let from = Int(start + sent)
                    window.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[from..<from + Int(slice)]))
                }
            } else {
                TestPattern.fill(window, offset: start + sent, seed: version.seed)
            }
            for fault in resource.faults {
                guard case .corruptBytes(let range) = fault else { continue }
                let lower = max(range.lowerBound, start + sent)
                let upper = min(range.upperBound, start + sent + slice)
                for offset in stride(from: lower, to: upper, by: 1) { window[Int(offset - start - sent)] ^= 0xFF }
            }
            if sent + slice >= length, connection.waitForPipelinedInput(seconds: 0) {
                origin.recordNextArrivedBeforeTheEnd(request.sequenceNumber)
            }
            if chunked { try connection.write(String(slice, radix: 16) + "\r\n") }
            try connection.write(raw: UnsafeRawBufferPointer(window))
            if chunked { try connection.write("\r\n") }
            sent += slice
            if let rate = resource.bytesPerSecond, rate > 0 {
                let due = Double(sent) / Double(rate) - Date().timeIntervalSince(began)
                if due > 0 { connection.sleep(seconds: due) }
            }
        }
        if malformedChunks {
            try connection.write("zz-not-hex\r\n")
            connection.close()
            return false
        }
        if chunked { try connection.write("0\r\n\r\n") }
        return true
    }

    // MARK: Heads

    private func writeHead(status: Int, headers: [(String, String)]) throws {
        var all = headers
        for fault in resource.faults {
            if case .delayHead(let seconds) = fault { connection.sleep(seconds: seconds) }
            if case .hugeHead(let bytes) = fault {
                let current = Self.head(status: status, headers: all).utf8.count
                let padding = max(1, bytes - current - "X-Padding: \r\n".utf8.count)
                all.append(("X-Padding", String(repeating: "a", count: padding)))
            }
        }
        try connection.write(Self.head(status: status, headers: all))
    }

    /// The serialised head: status line, `Server`, the fields, and the blank line.
    static func head(status: Int, headers: [(String, String)]) -> String {
        var text = "HTTP/1.1 \(status) \(reasonPhrase(status))\r\nServer: DownloadKit-FaultOrigin\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        return text + "\r\n"
    }

    /// Writes a complete response with a fixed body; adds `Content-Length` unless the headers frame the
    /// body themselves. The length is announced even when `includeBody` is false (HEAD).
    static func writeSimple(
        status: Int, headers: [(String, String)], body: [UInt8], includeBody: Bool, on connection: OriginConnection
    ) throws {
        var all = headers
        let framed = headers.contains {
            DKHTTPHeaders.namesEqual($0.0, "Content-Length") || DKHTTPHeaders.namesEqual($0.0, "Transfer-Encoding")
        }
        if !framed { all.append(("Content-Length", String(body.count))) }
        var bytes = Array(head(status: status, headers: all).utf8)
        if includeBody { bytes += body }
        try connection.write(bytes)
    }

    /// RFC 9112 §9.3: HTTP/1.1 is persistent unless `Connection: close`; HTTP/1.0 only with keep-alive.
    static func clientWantsKeepAlive(_ request: RecordedRequest) -> Bool {
        let options = request.headers.listValues(name: "Connection").map { $0.lowercased() }
        if options.contains("close") { return false }
        if request.version == "HTTP/1.0" { return options.contains("keep-alive") }
        return true
    }

    static func reasonPhrase(_ status: Int) -> String {
        ResponseHead.standardReason(for: status) ?? "Status"
    }
}
