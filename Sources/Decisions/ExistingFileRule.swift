import HTTPWire

/// What a destination that already exists means for a download, decided before any request (`--no-clobber`,
/// `--if-modified`; DownloadKit's `ExistingFilePolicy`), and the conditions of the conditional first request.
/// Facts in (gathered by the caller from the file system), a verdict out (table-tested in `ExistingFileRuleTests`);
/// the download machine's `existingDestination(_:policy:)` answers with it what its executor found (``Found``).
///
/// - `replace`, a destination that is no regular file, or partial data beside it (a download of it under way
///   or interrupted, which the engine resumes): download as if there were no file.
/// - `keep`: keep it and send nothing.
/// - `keepIfNotModified`: ask first — unless the file belongs to another user: another user's file is no
///   evidence of a download of ours, whatever a server says of its date or validators (planted in a shared
///   directory, it would be reported as this download), so it is downloaded again and the final rename
///   replaces it.
package enum ExistingFileRule {
    /// What the caller asked for an existing destination.
    package enum Policy: Sendable, Hashable {
        case replace
        case keep
        case keepIfNotModified
    }

    /// What the file system says of the destination.
    package struct Facts: Sendable, Hashable {
        /// The destination is a regular file (not followed through a symlink).
        package var isRegularFile: Bool
        /// The download's partial file exists beside it.
        package var partialExists: Bool
        /// The file's owner is the user this process runs as.
        package var ownedByUs: Bool

        package init(isRegularFile: Bool, partialExists: Bool, ownedByUs: Bool) {
            self.isRegularFile = isRegularFile
            self.partialExists = partialExists
            self.ownedByUs = ownedByUs
        }
    }

    /// What the caller found at a file destination before the run: the facts the verdict reads, and what the
    /// conditions and a kept file's result are made of (the validators recorded on the file when it was
    /// downloaded, its mtime and its size). The download machine's `existingDestination(_:policy:)` event.
    package struct Found: Sendable, Hashable {
        package var facts: Facts
        /// The `ETag` and `Last-Modified` recorded on the file (nil for one it does not carry).
        package var entityTag: String?
        package var lastModified: String?
        /// The file's mtime, seconds since 1970 (`If-Modified-Since` when no `Last-Modified` was recorded).
        package var modifiedSeconds: Int64
        /// The file's length (a kept file's result reports it; nothing is decided from it).
        package var size: Int64

        package init(facts: Facts, entityTag: String?, lastModified: String?, modifiedSeconds: Int64, size: Int64) {
            self.facts = facts
            self.entityTag = entityTag
            self.lastModified = lastModified
            self.modifiedSeconds = modifiedSeconds
            self.size = size
        }

        /// The conditions of the first request about this file
        /// (``ExistingFileRule/conditions(entityTag:lastModified:modifiedSeconds:)``).
        package var conditions: DKHTTPHeaders {
            ExistingFileRule.conditions(
                entityTag: entityTag, lastModified: lastModified, modifiedSeconds: modifiedSeconds)
        }
    }

    /// Whether `policy` depends on what is at the destination: `replace` downloads whatever is there, so
    /// the caller need not look (no `lstat`, no attribute read).
    package static func looks(_ policy: Policy) -> Bool {
        policy != .replace
    }

    /// What the run does.
    package enum Verdict: Sendable, Hashable {
        /// Download as if there were no file.
        case download
        /// Keep the file; send nothing.
        case keep
        /// Send the first request with ``conditions(entityTag:lastModified:modifiedSeconds:)``: a `304` keeps
        /// the file, any other answer is the download itself.
        case askFirst
    }

    package static func verdict(_ policy: Policy, _ facts: Facts) -> Verdict {
        guard looks(policy), facts.isRegularFile, !facts.partialExists else { return .download }
        if policy == .keep { return .keep }
        return facts.ownedByUs ? .askFirst : .download
    }

    /// The conditions of the first request: `If-None-Match` with the ETag recorded when the file was
    /// downloaded, and `If-Modified-Since` with the recorded `Last-Modified`, else the file's mtime
    /// (`modifiedSeconds` since 1970).
    package static func conditions(entityTag: String?, lastModified: String?, modifiedSeconds: Int64) -> DKHTTPHeaders {
        var conditions = DKHTTPHeaders()
        if let entityTag { conditions.add(name: "If-None-Match", value: entityTag) }
        conditions.add(
            name: "If-Modified-Since", value: lastModified ?? HTTPDate(secondsSince1970: modifiedSeconds).headerValue)
        return conditions
    }
}
