// libFuzzer harness for hostile file names: Content-Disposition values and URL segments through
// FileNaming.sanitizedFileName and FileNaming.fileName(forURL:…).
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary with Sources/HTTPWire/*.swift and
// Sources/DownloadKit/FileNaming.swift (which needs only Foundation).
// Byte 0 picks the mode: even → the rest is a Content-Disposition field value, parsed by HTTPWire and
// its preferred file name sanitised; odd → the rest is a raw proposed name (a URL segment, a file id).
// Every name that comes out must be one harmless path component that the engine can keep across
// resumes: not empty, not "." or "..", no "/", "\" or NUL, no control characters, no leading dot,
// at most 255 UTF-8 bytes, and a fixed point (sanitising it again changes nothing: the resume info
// requires DownloadKitFileName to be one). All checks are on bytes and scalars, never Characters: a "/"
// followed by a combining mark is one Character but still a path separator on disk.
//
// Open bugs found by this target (FileNaming splits and trims by Character) have their inputs in
// Fuzz/regressions/filenames/; `Fuzz/bin/fuzz-filenames Fuzz/regressions/filenames/*` must pass once fixed.

func checkSafeName(_ name: String, from proposed: String) {
    let bytes = Array(name.utf8)
    check(!bytes.isEmpty, "empty name from \(proposed.debugDescription)")
    check(bytes != [0x2E] && bytes != [0x2E, 0x2E], "dot name from \(proposed.debugDescription)")
    check(!bytes.contains(0x2F) && !bytes.contains(0x5C), "separator in \(name.debugDescription)")
    check(!bytes.contains(0), "NUL in \(name.debugDescription)")
    check(!name.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) },
        "control character in \(name.debugDescription)")
    check(bytes[0] != UInt8(ascii: "."), "hidden file \(name.debugDescription)")
    check(bytes.count <= FileNaming.maxNameBytes, "\(bytes.count) bytes from \(proposed.debugDescription)")
}

func fuzzProposedName(_ proposed: String) {
    guard let name = FileNaming.sanitizedFileName(proposed) else { return }
    checkSafeName(name, from: proposed)
    check(FileNaming.sanitizedFileName(name) == name, "not a fixed point: \(name.debugDescription)")
}

func fuzzURLNaming(_ text: String) {
    // The text's first line is the extension candidate, the rest the file id.
    let parts = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
    let name = FileNaming.fileName(
        forURL: text, pathExtension: parts.first, fileID: parts.count > 1 ? parts[1] : nil,
        md5Hex: { _ in "0123456789abcdef0123456789abcdef" })
    checkSafeName(name, from: text)
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-filenames`).
func fuzzFileNames(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data + 1, count: size - 1), as: UTF8.self)
    if data[0] & 1 == 0 {
        if let disposition = try? ContentDisposition(parsing: text) {
            if let name = disposition.preferredFilename { fuzzProposedName(name) }
            if let name = disposition.filename { fuzzProposedName(name) }
        }
    } else {
        fuzzProposedName(text)
        fuzzURLNaming(text)
    }
    return 0
}
