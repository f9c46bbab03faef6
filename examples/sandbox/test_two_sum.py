def check(candidate):
    assert candidate([2, 7, 11, 15], 9) == [0, 1]
    assert candidate([3, 2, 4], 6) == [1, 2]
    assert candidate([3, 3], 6) == [0, 1]
    assert candidate([1, 2], 7) == []


check(two_sum)
