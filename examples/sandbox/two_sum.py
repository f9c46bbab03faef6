from typing import List


def two_sum(nums: List[int], target: int) -> List[int]:
    """Return the indices of the two numbers that add up to target."""
    seen = {}
    for i, x in enumerate(nums):
        if target - x in seen:
            return [seen[target - x], i]
        seen[x] = i
    return []
