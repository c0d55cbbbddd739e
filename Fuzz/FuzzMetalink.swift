// libFuzzer harness for Metalink documents (DownloadKitMetalink: the XML reader and the Metalink 4/3 model)
// and the Metalink/HTTP header grammars (RFC 6249: Link, Digest, Repr-Digest in HTTPWire).
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary with Sources/HTTPWire/*.swift, Sources/Metalink/*.swift
// and Sources/DownloadKit/FileNaming.swift (one module: the Metalink sources' `import HTTPWire` is compiled
// out).
// Input: "L\n…", "D\n…" or "R\n…" feed the rest to the Link, Digest or Repr-Digest parser; "N\n…" makes the rest a
// file name for MetalinkFileName alone (a name mutated byte by byte finds a rule gap far sooner than one inside a
// document); anything else is a Metalink document, whole. Properties, for every input:
// - never traps; parsing twice gives the same value or the same error (deterministic); an error other than
//   the size limit carries a line and column of at least 1;
// - an accepted document's names are safe: relative, no `..`, and every component is one that
//   FileNaming.sanitizedFileName keeps as it is (up to NFC), so the Metalink rule and FileNaming cannot drift;
//   the working-file suffixes are FileNaming's;
// - piece hashes cover the file (⌈size ÷ length⌉ of them); URLs are sorted best first;
// - the model written as Metalink 4 parses back to the same model (version v4), and writing that again gives
//   the same text;
// - a name MetalinkFileName accepts is one FileNaming keeps, component by component (up to NFC), and a single
//   component FileNaming keeps is one MetalinkFileName accepts: the two rules agree;
// - an accepted header, written back (`headerValue`), parses to the same value.
import Foundation

func fuzzMetalinkDocument(_ bytes: [UInt8]) {
    let first = Result { () throws(MetalinkError) in try Metalink(parsing: bytes) }
    let second = Result { () throws(MetalinkError) in try Metalink(parsing: bytes) }
    check(first == second, "not deterministic")
    let metalink: Metalink
    switch first {
    case .failure(let error):
        if error.code != .sizeLimitExceeded {
            check((error.line ?? 0) >= 1 && (error.column ?? 0) >= 1, "no position in \(error)")
        }
        return
    case .success(let value):
        metalink = value
    }
    check(!metalink.files.isEmpty, "no files accepted")
    for file in metalink.files {
        check(MetalinkFileName.problem(in: file.name) == nil, "unsafe name accepted: \(file.name.debugDescription)")
        checkAcceptedName(file.name)
        if let size = file.size {
            check(size >= 0, "negative size")
            for pieces in file.pieces {
                check(
                    Int64(pieces.hashes.count) == pieces.pieceCount(forSize: size), "pieces do not cover \(size) bytes")
            }
        }
        for pieces in file.pieces {
            check(pieces.length > 0 && pieces.hashes.allSatisfy { $0.algorithm == pieces.algorithm }, "bad piece list")
        }
        check(file.urls.map(\.priority) == file.urls.map(\.priority).sorted(), "URLs not ranked")
        check(file.urls.allSatisfy { (1...MetalinkURL.lowestPriority).contains($0.priority) }, "priority out of range")
    }
    let written = metalink.metalink4Document
    var expected = metalink
    expected.version = .v4
    let reread: Metalink
    do {
        reread = try Metalink(parsing: written)
    } catch {
        fatalError("property violated: written document refused: \(error)\n\(written)")
    }
    check(reread == expected, "round trip changed the model:\n\(written)")
    check(reread.metalink4Document == written, "writing is not a fixed point")
}

/// A name MetalinkFileName accepted: relative, no traversal, every component kept by FileNaming (up to NFC).
func checkAcceptedName(_ name: String) {
    check(
        MetalinkFileName.reservedSuffixes == FileNaming.reservedSuffixes,
        "working-file suffixes differ from FileNaming's")
    check(!name.hasPrefix("/"), "absolute name \(name.debugDescription)")
    for component in name.utf8.split(separator: 0x2F, omittingEmptySubsequences: false) {
        let text = String(decoding: component, as: UTF8.self)
        check(!component.elementsEqual("..".utf8) && !component.isEmpty, "traversal in \(name.debugDescription)")
        check(
            FileNaming.sanitizedFileName(text) == text.precomposedStringWithCanonicalMapping,
            "FileNaming would change \(text.debugDescription)")
    }
}

func fuzzMetalinkFileName(_ name: String) {
    if MetalinkFileName.problem(in: name) == nil {
        checkAcceptedName(name)
    } else if !name.utf8.contains(0x2F), !name.utf8.contains(0x5C),
        name.utf8.count <= MetalinkFileName.maxComponentBytes,
        FileNaming.sanitizedFileName(name) == name.precomposedStringWithCanonicalMapping
    {
        check(
            false,
            "FileNaming keeps \(name.debugDescription) but MetalinkFileName refuses it: \(MetalinkFileName.problem(in: name) ?? "")"
        )
    }
}

func fuzzMetalinkHeader(_ mode: UInt8, _ text: String) {
    switch mode {
    case UInt8(ascii: "L"):
        let first = Result { () throws(WireError) in try LinkHeader(parsing: text) }
        check(first == Result { () throws(WireError) in try LinkHeader(parsing: text) }, "Link not deterministic")
        guard case .success(let header) = first else { return }
        check((try? LinkHeader(parsing: header.headerValue)) == header, "Link round trip: \(header.headerValue)")
        for mirror in header.duplicates {
            check(mirror.priority.map { (1...999_999).contains($0) } ?? true, "pri out of range")
            check(mirror.location.map { $0.utf8.count == 2 } ?? true, "geo \(mirror.location ?? "")")
        }
    case UInt8(ascii: "D"):
        guard let header = try? DigestHeader(parsing: text) else { return }
        check((try? DigestHeader(parsing: header.headerValue)) == header, "Digest round trip: \(header.headerValue)")
    default:
        guard let header = try? IntegrityDigestHeader(parsing: text) else { return }
        check(
            (try? IntegrityDigestHeader(parsing: header.headerValue)) == header,
            "Repr-Digest round trip: \(header.headerValue)")
    }
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-metalink`).
func fuzzMetalink(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if bytes.count >= 2, bytes[1] == 0x0A, bytes[0] == UInt8(ascii: "N") {
        fuzzMetalinkFileName(String(decoding: bytes[2...], as: UTF8.self))
    } else if bytes.count >= 2, bytes[1] == 0x0A,
        [UInt8(ascii: "L"), UInt8(ascii: "D"), UInt8(ascii: "R")].contains(bytes[0])
    {
        fuzzMetalinkHeader(bytes[0], String(decoding: bytes[2...], as: UTF8.self))
    } else {
        fuzzMetalinkDocument(bytes)
    }
    return 0
}
