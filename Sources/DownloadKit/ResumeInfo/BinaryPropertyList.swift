import Foundation

/// Writes `bplist00` binary property lists from an ``ArchiveValue`` tree: the encoder of the resume info,
/// whose decoder is ``PropertyListTree``.
///
/// Foundation's `PropertyListSerialization` bridges every value to an `NSObject` and took 11 % of all
/// the CPU of a thousand 64 KiB downloads (each writes one record; issue #18); this writes the bytes
/// directly. The output is what CoreFoundation writes, minus its uniquing of equal strings (allowed by the
/// format, which only requires that references point at objects): a header, the objects, an offset table
/// and the 32-byte trailer. Dictionary keys are written sorted, so equal values give equal bytes. Only the
/// value kinds a record holds are written (`.null`, `.object` and `.uid` have no plist form here and trap
/// in debug builds; they are never produced by an encoder).
enum BinaryPropertyList {
    /// The bytes of `root` as a `bplist00` property list.
    static func encode(_ root: ArchiveValue) -> Data {
        var flattener = Flattener()
        let top = flattener.add(root)
        let objects = flattener.objects
        let referenceSize = byteWidth(UInt64(objects.count))
        var output: [UInt8] = Array("bplist00".utf8)
        output.reserveCapacity(64 + objects.count * 16)
        var offsets: [Int] = []
        offsets.reserveCapacity(objects.count)
        for object in objects {
            offsets.append(output.count)
            write(object, referenceSize: referenceSize, into: &output)
        }
        let offsetTableStart = output.count
        let offsetSize = byteWidth(UInt64(offsetTableStart))
        for offset in offsets { appendBigEndian(UInt64(offset), width: offsetSize, to: &output) }
        output += [0, 0, 0, 0, 0, 0]  // unused, then the sort version
        output.append(UInt8(offsetSize))
        output.append(UInt8(referenceSize))
        appendBigEndian(UInt64(objects.count), width: 8, to: &output)
        appendBigEndian(UInt64(top), width: 8, to: &output)
        appendBigEndian(UInt64(offsetTableStart), width: 8, to: &output)
        return Data(output)
    }

    /// One object of the flat object table: a scalar, or a container of references to other objects.
    private enum FlatObject {
        case scalar(ArchiveValue)
        case array([Int])
        case dictionary(keys: [Int], values: [Int])
    }

    /// Numbers every object depth-first (a container before its children), as the object table lists them.
    private struct Flattener {
        var objects: [FlatObject] = []

        mutating func add(_ value: ArchiveValue) -> Int {
            let index = objects.count
            objects.append(.scalar(value))
            switch value {
            case .array(let elements):
                objects[index] = .array(elements.map { add($0) })
            case .dictionary(let dictionary):
                var keys: [Int] = []
                var values: [Int] = []
                for key in dictionary.keys.sorted() {
                    keys.append(add(.string(key)))
                    values.append(add(dictionary[key] ?? .null))
                }
                objects[index] = .dictionary(keys: keys, values: values)
            default:
                break
            }
            return index
        }
    }

    private static func write(_ object: FlatObject, referenceSize: Int, into output: inout [UInt8]) {
        switch object {
        case .array(let references):
            appendMarker(0xA, count: references.count, to: &output)
            for reference in references { appendBigEndian(UInt64(reference), width: referenceSize, to: &output) }
        case .dictionary(let keys, let values):
            appendMarker(0xD, count: keys.count, to: &output)
            for reference in keys + values { appendBigEndian(UInt64(reference), width: referenceSize, to: &output) }
        case .scalar(let value):
            writeScalar(value, into: &output)
        }
    }

    private static func writeScalar(_ value: ArchiveValue, into output: inout [UInt8]) {
        switch value {
        case .bool(let flag):
            output.append(flag ? 0x09 : 0x08)
        case .integer(let number):
            appendInteger(number, to: &output)
        case .real(let number):
            output.append(0x23)
            appendBigEndian(number.bitPattern, width: 8, to: &output)
        case .date(let date):
            output.append(0x33)
            appendBigEndian(date.timeIntervalSinceReferenceDate.bitPattern, width: 8, to: &output)
        case .data(let bytes):
            appendMarker(0x4, count: bytes.count, to: &output)
            output += bytes
        case .string(let text):
            if text.utf8.allSatisfy({ $0 < 0x80 }) {
                appendMarker(0x5, count: text.utf8.count, to: &output)
                output += text.utf8
            } else {
                let units = Array(text.utf16)
                appendMarker(0x6, count: units.count, to: &output)
                for unit in units { appendBigEndian(UInt64(unit), width: 2, to: &output) }
            }
        case .null, .object, .uid, .array, .dictionary:
            // Containers are flattened before this point; the others are never encoded.
            assertionFailure("BinaryPropertyList cannot write \(value)")
            output.append(0x00)
        }
    }

    /// An integer object: 1, 2 or 4 bytes (unsigned) when the value fits, else 8 (two's complement).
    private static func appendInteger(_ number: Int64, to output: inout [UInt8]) {
        let width = number < 0 ? 8 : byteWidth(UInt64(number))
        output.append(0x10 | UInt8(width.trailingZeroBitCount))
        appendBigEndian(UInt64(bitPattern: number), width: width, to: &output)
    }

    /// A marker byte with `count` in its low nibble, or 0xF and the count as an integer object after it.
    private static func appendMarker(_ kind: UInt8, count: Int, to output: inout [UInt8]) {
        if count < 15 {
            output.append(kind << 4 | UInt8(count))
        } else {
            output.append(kind << 4 | 0xF)
            appendInteger(Int64(count), to: &output)
        }
    }

    /// The fewest of 1, 2, 4 or 8 bytes that hold `value`.
    private static func byteWidth(_ value: UInt64) -> Int {
        switch value {
        case 0...0xFF: 1
        case 0...0xFFFF: 2
        case 0...0xFFFF_FFFF: 4
        default: 8
        }
    }

    private static func appendBigEndian(_ value: UInt64, width: Int, to output: inout [UInt8]) {
        for shift in stride(from: (width - 1) * 8, through: 0, by: -8) {
            output.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
        }
    }
}
